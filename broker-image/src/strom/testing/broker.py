"""One real broker process for tests of every package (broker, client, CLI, operator, Spark).

A :class:`BrokerProcess` runs ``python -m strom.broker`` as a child process on 127.0.0.1 with free
ports and a data directory of the test's choosing, waits until ``/readyz`` says it serves (bounded
time; on failure the error includes the tail of the child's stderr, which is captured to
``<data dir>/broker-<id>.stderr.log``; the process plumbing is :mod:`strom.testing.process`),
and offers the real faults: :meth:`~BrokerProcess.kill` (SIGKILL),
:meth:`~BrokerProcess.terminate` (SIGTERM, graceful), :meth:`~BrokerProcess.pause` /
:meth:`~BrokerProcess.resume` (SIGSTOP / SIGCONT: a paused broker looks partitioned) and
:meth:`~BrokerProcess.restart` (same ports, same data). The process is always stopped: by
``__exit__``, by :meth:`~BrokerProcess.stop`, and by a finalizer if the object is dropped.

Typical use::

    from strom.testing import running_broker

    def test_something(tmp_path):
        with running_broker(tmp_path, auto_create_topics_enable=True) as broker:
            channel = grpc.insecure_channel(broker.bootstrap)
            ...

Config keywords use underscores for dots (``log_retention_ms=1000`` is ``log.retention.ms``);
pass ``config={"log.retention.ms": "1000"}`` for exact keys. pytest is imported only by
:func:`broker_fixture`, so this module has no test-only dependencies.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from strom.testing.process import (
    STOP_TIMEOUT_S,
    ManagedProcess,
    ProcessStartError,
    free_port,
    free_ports,
    starts_processes,
)

__all__ = [
    "BrokerHandle",
    "BrokerProcess",
    "BrokerStartError",
    "broker_fixture",
    "config_from_kwargs",
    "config_value",
    "free_port",
    "free_ports",
    "running_broker",
]

STARTUP_TIMEOUT_S = 30.0

#: The broker did not become ready; the message ends with its log tail.
BrokerStartError = ProcessStartError


def config_from_kwargs(kwargs: Mapping[str, object]) -> dict[str, str]:
    """``log_retention_ms=1000`` -> ``{"log.retention.ms": "1000"}``."""
    return {key.replace("_", "."): _str(value) for key, value in kwargs.items()}


def probe_ready(ready_url: str, timeout: float = 1.0) -> bool:
    """True if a broker's metrics server answers ``/readyz`` with 200."""
    try:
        with urllib.request.urlopen(ready_url, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


class BrokerProcess:
    """One broker child process. Not started until :meth:`start` (or ``with``)."""

    def __init__(self, data_dir: Path | str, *, broker_id: int = 0,
                 config: Mapping[str, object] | None = None, port: int | None = None,
                 metrics_port: int | None = None, kafka_port: int | None = None,
                 startup_timeout: float = STARTUP_TIMEOUT_S,
                 env: Mapping[str, str] | None = None, netns: str | None = None,
                 nofile: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.netns = netns
        """Run inside this network namespace (``ip netns exec``); see ``strom.testing.netns``."""
        self.nofile = nofile
        """Start with RLIMIT_NOFILE lowered to this (soft and hard): the broker cannot raise it."""
        self.broker_id = broker_id
        # Picked together, so no two are the same: three separate picks could return one port
        # twice (each free when picked), and the broker then failed to bind its second
        # listener ("address already in use" on its own gRPC port, ci23).
        picked = iter(free_ports(sum(1 for p in (port, metrics_port, kafka_port) if not p)))
        self.port = port or next(picked)
        self.metrics_port = metrics_port or next(picked)
        self.kafka_port = kafka_port or next(picked)
        self.startup_timeout = startup_timeout
        self.config: dict[str, str] = {
            "broker.id": str(broker_id),
            "host": "127.0.0.1",
            "port": str(self.port),
            "metrics.port": str(self.metrics_port),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.kafka_port}",
            "log.dirs": str(self.data_dir / f"broker-{broker_id}"),
            "shutdown.timeout.ms": "5000",
        }
        if config:
            self.config.update({k: _str(v) for k, v in config.items()})
            if "listeners" not in config and self.config["host"] != "127.0.0.1":
                self.config["listeners"] = f"PLAINTEXT://{self.config['host']}:{self.kafka_port}"
        # explicit port settings win; keep the attributes in step with what the child uses
        self.port = int(self.config["port"])
        self.metrics_port = int(self.config["metrics.port"])
        if self.port == 0 or self.metrics_port == 0:
            raise ValueError("BrokerProcess needs fixed ports (port=0 / metrics.port=0 would "
                             "hide where the broker listens); leave them unset for free ones")
        self.stderr_path = self.data_dir / f"broker-{broker_id}.stderr.log"
        self._process = ManagedProcess(
            self.command(), self.stderr_path, name=f"broker {broker_id}",
            env={"PYTHONUNBUFFERED": "1", **dict(env or {})})
        self.paused = False

    # -- addresses ----------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """The address it binds (127.0.0.1 unless it runs in a network namespace)."""
        return self.config["host"]

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def kafka_bootstrap(self) -> str:
        """The Kafka-protocol listener's address (``bootstrap.servers`` of Kafka clients)."""
        return f"{self.host}:{self.kafka_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def health_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/healthz"

    @property
    def ready_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/readyz"

    @property
    def log_dir(self) -> Path:
        return Path(self.config["log.dirs"].split(",")[0])

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    def is_alive(self) -> bool:
        return self._process.is_alive()

    # -- lifecycle ----------------------------------------------------------------------------

    def command(self) -> list[str]:
        # ``ip netns exec`` execs the command in place, so the pid stays the broker's
        cmd = ["ip", "netns", "exec", self.netns] if self.netns else []
        if self.nofile is not None:  # lower the limit, then exec the broker (same pid)
            cmd += [sys.executable, "-c", _NOFILE_EXEC, str(self.nofile)]
        cmd += [sys.executable, "-m", "strom.broker"]
        for key, value in self.config.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start(self, *, wait: bool = True) -> BrokerProcess:
        if self.is_alive():
            raise RuntimeError(f"broker {self.broker_id} is already running (pid {self.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._process.argv = self.command()
        self._process.start()
        self.paused = False
        if wait:
            try:
                self.wait_ready()
            except BaseException:
                self.kill()
                raise
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Poll ``/readyz`` until 200; raise BrokerStartError with the log tail otherwise."""
        self._process.wait_ready(self.is_ready,
                                 self.startup_timeout if timeout is None else timeout)

    def is_ready(self) -> bool:
        return probe_ready(self.ready_url)

    def stderr_tail(self, lines: int = 40) -> str:
        return self._process.log_tail(lines)

    def kill(self) -> None:
        """SIGKILL (kill -9) and reap; no flush, no clean-shutdown marker."""
        self._process.kill()
        self.paused = False

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; returns the exit code (SIGKILL after ``timeout``, then raises)."""
        if self.returncode is None and not self.is_alive():
            raise RuntimeError("broker not started")
        if self._process.stop(timeout) == "killed":
            self.paused = False
            raise TimeoutError(
                f"broker {self.broker_id} did not exit within {timeout}s of SIGTERM; "
                f"killed\n--- stderr tail:\n{self.stderr_tail()}")
        self.paused = False
        code = self.returncode
        assert code is not None
        return int(code)

    def signal_stop(self) -> None:
        """SIGTERM without waiting (stop several brokers at once; then :meth:`wait_stopped`)."""
        if self.paused:
            self.resume()
        self._process.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """Wait for the process to exit; True if it did (or never ran)."""
        return self._process.wait_stopped(timeout)

    def stop(self) -> None:
        """Graceful stop if possible, kill otherwise; never raises for a dead process."""
        self._process.stop()
        self.paused = False

    def restart(self, *, kill: bool = False) -> BrokerProcess:
        """Stop (SIGTERM, or SIGKILL with ``kill=True``) and start again on the same ports."""
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start()

    def pause(self) -> None:
        """SIGSTOP: the process holds its sockets but answers nothing."""
        self._process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self._process.send_signal(signal.SIGCONT)
        self.paused = False

    def __enter__(self) -> BrokerProcess:
        if not self.is_alive():
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_alive() else f"exited {self.returncode}"
        return f"<BrokerProcess {self.broker_id} {self.bootstrap} {state}>"


BrokerHandle = BrokerProcess


_NOFILE_EXEC = ("import os, resource, sys; n = int(sys.argv[1]); "
                "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
                "os.execv(sys.argv[2], sys.argv[2:])")


def config_value(value: object) -> str:
    """A config value as the broker's ``--set`` reads it (bools lower-case, lists comma-joined)."""
    return _str(value)


def _str(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


@contextlib.contextmanager
def running_broker(tmp_path: Path | str, *, broker_id: int = 0,
                   config: Mapping[str, object] | None = None,
                   startup_timeout: float = STARTUP_TIMEOUT_S,
                   **settings: object) -> Iterator[BrokerProcess]:
    """Start a broker in ``tmp_path``, yield it ready, and always stop it afterwards."""
    merged = config_from_kwargs(settings)
    merged.update({k: _str(v) for k, v in (config or {}).items()})
    broker = BrokerProcess(tmp_path, broker_id=broker_id, config=merged,
                           startup_timeout=startup_timeout)
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


def broker_fixture(scope: Literal["session", "package", "module", "class", "function"] = "function",
                   *, config: Mapping[str, object] | None = None,
                   **settings: object) -> Callable[..., Any]:
    """A pytest fixture that yields a ready :class:`BrokerProcess`, stopped at teardown::

        broker = broker_fixture(auto_create_topics_enable=True)   # in a conftest or test module

        def test_x(broker): ...
    """
    import pytest

    @pytest.fixture(scope=scope)
    @starts_processes
    def _broker(tmp_path_factory: Any) -> Iterator[BrokerProcess]:
        merged = config_from_kwargs(settings)
        merged.update({k: _str(v) for k, v in (config or {}).items()})
        with running_broker(tmp_path_factory.mktemp("broker"), config=merged) as broker:
            yield broker

    return _broker
