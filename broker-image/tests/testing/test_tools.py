"""A test that lacks a tool skips on a developer machine and fails under CI=true."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from strom.testing.tools import in_ci, missing, require_tool


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes"])
def test_ci_is_recognised(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci()


def test_a_missing_tool_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.fail.Exception, match="CI=true but promtool is not installed"):
        require_tool("promtool", "Debian package prometheus")


def test_a_missing_tool_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert not in_ci()
    with pytest.raises(pytest.skip.Exception, match=r"promtool is not installed \(Debian"):
        require_tool("promtool", "Debian package prometheus")
    with pytest.raises(pytest.skip.Exception, match="no netns"):
        missing("no netns")


def test_a_present_tool_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert require_tool("sh", "coreutils").endswith("/sh")


def test_ci_is_read_in_one_place() -> None:
    """Only :func:`in_ci` reads ``CI``: a copy had drifted (the kube fixture skipped under
    ``CI=1``, where every other suite failed)."""
    repo = Path(__file__).resolve().parents[3]
    reads_ci = re.compile(r"""environ(\.get\(|\[)\s*["']CI["']""")
    names = subprocess.run(["git", "ls-files", "-z", "*.py"], cwd=repo, capture_output=True,
                           check=True).stdout.decode().split("\0")
    found = [name for name in names if name and (repo / name).is_file()
             and reads_ci.search((repo / name).read_text(encoding="utf-8", errors="replace"))]
    assert found == ["broker-image/src/strom/testing/tools.py"]
