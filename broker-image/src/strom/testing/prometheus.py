"""A real Prometheus server (Debian's ``prometheus`` binary) for tests of metrics, dashboards
and scrape configurations.

:func:`running_prometheus` writes the given configuration into a directory, starts Prometheus on
a free 127.0.0.1 port with its TSDB there, waits until ``/-/ready`` answers and stops it (by
PID) at exit. :class:`PrometheusApi` is the part of the HTTP API tests need: instant queries,
label values, targets and ``wait_for`` (bounded, with the last answer in its error).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from strom.testing.process import ManagedProcess, free_port

T = TypeVar("T")

START_TIMEOUT_S = 60.0


class PrometheusError(AssertionError):
    """A query Prometheus refused, or a wait that ran out (an AssertionError: a test failure)."""


def prometheus_binary() -> str | None:
    """Path of the ``prometheus`` server binary (Debian package ``prometheus``), or None."""
    return shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)


class PrometheusApi:
    """The HTTP API of one Prometheus server at ``url`` (``http://host:port``)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: Sequence[tuple[str, str]] = ()) -> Any:
        query = urllib.parse.urlencode(list(params))
        full = f"{self.url}{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(full, timeout=self.timeout) as answer:
                body = json.loads(answer.read())
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            raise PrometheusError(
                f"GET {path} {dict(params)} -> HTTP {err.code}: {detail}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"GET {path} {dict(params)} -> {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query at now; the result as a list of series (a scalar becomes one)."""
        data = self._get("/api/v1/query", [("query", expr)])
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        params = [("match[]", match)] if match else []
        values: list[str] = self._get(f"/api/v1/label/{label}/values", params)
        return values

    def metric_names(self) -> list[str]:
        return self.label_values("__name__")

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self._get("/api/v1/targets")["activeTargets"]
        return active

    def wait_for(self, what: str, check: Callable[[], T | None], timeout: float = 60.0,
                 interval: float = 0.5) -> T:
        """Poll ``check`` until it returns something other than None/False/empty."""
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                value = check()
                if value:
                    return value
                last = value
            except PrometheusError as err:
                last = err
            if time.monotonic() >= deadline:
                raise PrometheusError(f"timed out after {timeout:.0f}s waiting for {what}; "
                                      f"last: {str(last)[:2000]}")
            time.sleep(interval)


@contextlib.contextmanager
def running_prometheus(root: Path | str, config: str, *, binary: str | None = None,
                       host: str = "127.0.0.1", extra_args: Sequence[str] = ()
                       ) -> Iterator[PrometheusApi]:
    """Prometheus with ``config`` (YAML text) in ``root``; yields its API, stops it at exit."""
    exe = binary or prometheus_binary()
    if exe is None:
        raise FileNotFoundError("the prometheus binary is missing: install the Debian package "
                                "'prometheus' (apt-get install prometheus)")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "prometheus.yml").write_text(config)
    port = free_port(host)
    proc = ManagedProcess(
        [exe, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
         f"--web.listen-address={host}:{port}", "--log.level=warn", *extra_args],
        root / "prometheus.log", name="prometheus")
    api = PrometheusApi(f"http://{host}:{port}")

    def ready() -> bool:
        with urllib.request.urlopen(f"{api.url}/-/ready", timeout=2) as answer:
            return bool(answer.status == 200)

    proc.start()
    try:
        proc.wait_ready(ready, START_TIMEOUT_S, interval=0.2)
        yield api
    finally:
        proc.stop()
