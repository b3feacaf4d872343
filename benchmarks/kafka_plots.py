"""PNG plots of the Apache Kafka comparison (issue 20 part 5): throughput side by side and
the latency-versus-throughput curve, drawn from the run's :class:`~benchmarks.harness.Result`
rows. Only the pictures live here; the figures come from ``__main__`` and are in the JSON.
matplotlib is in the ``bench`` dependency group; without it no PNG is written (the table and
JSON do not need it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness import Result

#: Systems drawn side by side, in this order, when the run has them.
THROUGHPUT_SYSTEMS = ("kafka", "strom (confluent-kafka)", "strom", "kafka ProducerPerformance",
                      "strom ProducerPerformance", "kafka ConsumerPerformance",
                      "strom ConsumerPerformance")


def _pyplot() -> Any:
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    return plt


def throughput_png(results: list[Result], path: Path) -> bool:
    """Grouped bars: records/s of produce and consume per workload, one bar per system."""
    plt = _pyplot()
    rows = [r for r in results if r.metric in ("produce", "consume")
            and r.workload in ("1p-100B", "8p-1KiB") and r.system in THROUGHPUT_SYSTEMS]
    if plt is None or not rows:
        return False
    groups = sorted({(r.workload, r.metric) for r in rows})
    systems = [s for s in THROUGHPUT_SYSTEMS if any(r.system == s for r in rows)]
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, system in enumerate(systems):
        values = {(r.workload, r.metric): r.value for r in rows if r.system == system}
        xs = [g + i * width for g in range(len(groups))]
        ax.bar(xs, [values.get(g, 0.0) for g in groups], width, label=system)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{w}\n{m}" for w, m in groups])
    ax.set_ylabel("records/s (median of runs)")
    ax.set_title("Apache Kafka and Strom, same machine, same run")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return True


def latency_curve_png(results: list[Result], path: Path, workload: str = "curve-1p-100B",
                      shape: str = "1 partition, 100 B") -> bool:
    """p50 and p99 end-to-end latency against the offered rate, one line per system."""
    plt = _pyplot()
    rows = [r for r in results if r.workload == workload]
    if plt is None or not rows:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for system in sorted({r.system for r in rows}):
        for kind, what in (("e2e", "end to end"), ("ack", "send to ack")):
            for q, style in (("p50", "-o"), ("p99", "--s")):
                points = sorted((int(r.extra["rate"]), r.value) for r in rows
                                if r.system == system and r.metric.startswith(f"{kind} {q} "))
                if points:
                    ax.plot([p[0] for p in points], [p[1] for p in points], style,
                            label=f"{system} {q} ({what})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"offered rate, records/s ({shape}, linger.ms=0, acks=1)")
    ax.set_ylabel("latency, ms")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return True


def latency_curve_8p_png(results: list[Result], path: Path) -> bool:
    """The same curve with 8 partitions x 1 KiB."""
    return latency_curve_png(results, path, "curve-8p-1KiB", "8 partitions, 1 KiB")


def failover_png(results: list[Result], path: Path) -> bool:
    """Unavailability after kill -9 of the leader (and of a leader that is also the active
    controller): every run as a dot, the median as a bar."""
    plt = _pyplot()
    faults = {"failover kill -9": "kill -9",
              "failover kill -9 (leader + controller)": "kill -9, leader + controller"}
    rows = [r for r in results if r.workload in faults
            and r.metric == "unavailability median"]
    if plt is None or not rows:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, r in enumerate(rows):
        samples = [s / 1000 for s in r.extra.get("samples_ms", [])]
        ax.bar(i, r.value / 1000, 0.6, alpha=0.5, label=f"{r.system}, "
               f"{faults[r.workload]}: median {r.value / 1000:.2f} s")
        ax.plot([i] * len(samples), samples, "ko", markersize=4)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r.system.split(' ')[0]}\n{faults[r.workload]}" for r in rows],
                       fontsize=7)
    ax.set_ylabel("kill -9 of the leader to the next acknowledged write, s")
    ax.set_title("Failover, 3 nodes, RF=3, acks=all, production defaults")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return True
