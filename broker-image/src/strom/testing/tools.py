"""What a test does when a tool it needs is missing: skip on a developer machine, fail under
``CI=true``.

CI installs every tool a test needs (``.ci/run``), so there a missing tool is a broken CI set-up,
and a skip would let the run pass without testing the feature. pytest is imported only when a
test actually lacks a tool, so this module has no test-only dependencies.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

__all__ = ["find_go", "in_ci", "missing", "require_tool"]

#: Where the Go toolchain's tarball puts ``go`` when it is not on PATH.
GO_TARBALL_BINARY = "/usr/local/go/bin/go"


def in_ci() -> bool:
    """``CI`` is set to true (``true``, ``1`` or ``yes``, any case), as CI services set it: the one
    reading of ``CI`` (the kube fixture, the Spark suites and the benchmarks ask here too)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(reason: str) -> NoReturn:
    """End the calling test: a failure under CI, a skip with ``reason`` elsewhere."""
    import pytest

    if in_ci():
        pytest.fail(f"CI=true but {reason} (.ci/run installs what the tests need)",
                    pytrace=False)
    pytest.skip(reason)


def require_tool(command: str, install: str) -> str:
    """The path of ``command`` on PATH; without it :func:`missing`, naming how to ``install``."""
    path = shutil.which(command)
    if path is None:
        missing(f"{command} is not installed ({install})")
    return path


def find_go() -> str | None:
    """The ``go`` command: on PATH, else the Go tarball's ``/usr/local/go/bin/go``; None if
    neither (the tests that build Go programs and the benchmarks' Go floor ask here)."""
    path = shutil.which("go")
    if path is None and os.path.isfile(GO_TARBALL_BINARY):
        path = GO_TARBALL_BINARY
    return path
