"""Fixtures for the CLI tests: run the real ``strom`` entry point as a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strom.testing import BrokerProcess, running_broker
from strom.testing.process import starts_processes

StromRunner = Callable[..., subprocess.CompletedProcess[str]]


def strom_argv() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m``."""
    script = Path(sys.executable).parent / "strom"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "strom.cli.main"]


@pytest.fixture
def strom_cmd() -> list[str]:
    """The argv prefix that runs the installed ``strom`` (for Popen-level tests)."""
    return strom_argv()


@pytest.fixture
def strom() -> StromRunner:
    """``strom(*args, input=..., env=..., timeout=...)`` -> CompletedProcess (text mode)."""

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None,
            timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        full_env = {k: v for k, v in os.environ.items()
                    if k not in ("STROM_BOOTSTRAP_SERVERS", "STROM_DEBUG")}
        full_env.update(env or {})
        return subprocess.run(
            [*strom_argv(), *args], input=input, capture_output=True, text=True,
            env=full_env, timeout=timeout, cwd=cwd,
            stdin=None if input is not None else subprocess.DEVNULL,
        )

    return run


@pytest.fixture
@starts_processes
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A real broker process on 127.0.0.1 with random ports, stopped afterwards (by PID)."""
    with running_broker(tmp_path / "broker") as handle:
        yield handle


def recorded_pids(data_dir: Path) -> list[int]:
    """The broker pids a dev cluster recorded in ``DIR/cluster.json`` (none if unreadable)."""
    try:
        state = json.loads((data_dir / "cluster.json").read_text())
    except (OSError, ValueError):
        return []
    return [b["pid"] for b in state["brokers"] if b.get("pid")]


@pytest.fixture
@starts_processes
def data_dir(tmp_path: Path, strom: StromRunner) -> Iterator[Path]:
    """A dev-cluster data dir whose cluster is always stopped: ``dev down``, then SIGKILL any
    leftover broker."""
    from strom.cli.localcluster import pid_alive

    path = tmp_path / "dev"
    seen: set[int] = set()
    try:
        yield path
    finally:
        seen.update(recorded_pids(path))
        strom("dev", "down", "--data-dir", str(path), "--timeout", "10")
        for pid in seen:
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def dev_pids() -> Callable[[Path], list[int]]:
    """``dev_pids(data_dir)``: the broker pids a dev cluster recorded."""
    return recorded_pids
