"""Shared plumbing of the benchmarks: timing, percentiles, machine info, the table and the JSON.

Benchmarks live here, not in timed unit tests: a figure is only meaningful beside a peer measured
in the same run on the same machine, so every result row carries the ratio to its peer.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).parent / "results"


@dataclass
class Result:
    """One measured figure. ``peer`` names the row it is compared with (same metric)."""

    system: str
    workload: str
    metric: str
    value: float
    unit: str
    higher_is_better: bool = True
    peers: list[str] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return float(sorted_values[k])


def filesystem_of(path: str, mounts: str) -> dict[str, str]:
    """The mount that holds ``path`` (an absolute, resolved path), from ``/proc/self/mounts``
    text: its mount point, type and options, or {} when none matches.

    Why it is recorded: every broker of a benchmark, Strom's and Apache Kafka's, keeps its data
    under the temporary directory, and the filesystem there changes the comparison. On this
    project's VM the first write to a page of a memory-mapped file on its ext4 disk costs
    milliseconds of (mostly system) CPU where tmpfs costs microseconds; Kafka memory-maps its
    index files and Strom does not, so Kafka's rows there pay it once per index page
    (docs/decisions.md, "Apache Kafka's memory-mapped indexes on this VM's disk").
    ``TMPDIR=/dev/shm`` runs every broker on tmpfs."""
    best: dict[str, str] = {}
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point = fields[1].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best.get("mount_point", "")):
            best = {"mount_point": point, "type": fields[2], "options": fields[3]}
    return best


def machine_info() -> dict[str, Any]:
    data_dir = os.path.realpath(tempfile.gettempdir())
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "data_dir": data_dir,
    }
    with contextlib.suppress(OSError):
        info["data_filesystem"] = filesystem_of(data_dir,
                                                Path("/proc/self/mounts").read_text())
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_total_kb"] = int(f.readline().split()[1])
    except OSError:
        pass
    with contextlib.suppress(OSError):
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    return info


def attach_ratios(results: list[Result]) -> None:
    """Fill ``ratios[peer]`` = value / peer's value (same workload and metric) for each peer a
    row names. Ratios are always ours / theirs: above 1 is better for throughput, worse for
    latency (``higher_is_better`` says which)."""
    index = {(r.system, r.workload, r.metric): r for r in results}
    for r in results:
        for peer in r.peers:
            other = index.get((peer, r.workload, r.metric))
            if other is not None and other.value:
                r.ratios[peer] = r.value / other.value


def format_table(results: list[Result]) -> str:
    headers = ["workload", "system", "metric", "value", "unit", "ours / peer"]
    rows = []
    for r in results:
        ratio = ", ".join(f"{v:.2f}x {k}" for k, v in r.ratios.items())
        value = f"{r.value:,.0f}" if abs(r.value) >= 100 else f"{r.value:,.3f}"
        rows.append([r.workload, r.system, r.metric, value, r.unit, ratio])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    for row in rows:
        out.append("  ".join(
            c.rjust(w) if i == 3 else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ))
    return "\n".join(out)


def write_json(name: str, results: list[Result], params: dict[str, Any],
               out_dir: Path = RESULTS_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    doc = {"machine": machine_info(), "params": params, "results": [asdict(r) for r in results]}
    path.write_text(json.dumps(doc, indent=2))
    latest = out_dir / f"{name}-latest.json"
    latest.write_text(json.dumps(doc, indent=2))
    return path


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start
