"""The command our hints print works in the user's shell (issue 12 item 5: the demo said
``strom ...`` although ``strom`` is only on PATH inside ``uv run``)."""

from __future__ import annotations

import sys
from pathlib import Path

from strom.cli.invocation import strom_invocation


def test_under_uv_run_the_hint_says_uv_run() -> None:
    assert strom_invocation({"UV_RUN_RECURSION_DEPTH": "1"}, which=lambda _: "/x/strom") == (
        "uv run strom")


def test_strom_when_the_shell_finds_this_script(tmp_path: Path) -> None:
    (tmp_path / "strom").write_text("")
    python = str(tmp_path / "python")
    assert strom_invocation({}, which=lambda _: str(tmp_path / "strom"),
                            executable=python) == "strom"
    # another strom on PATH, or none: the full path of ours
    assert strom_invocation({}, which=lambda _: "/usr/bin/strom",
                            executable=python) == str(tmp_path / "strom")
    assert strom_invocation({}, which=lambda _: None, executable=python) == str(
        tmp_path / "strom")


def test_without_a_script_python_dash_m(tmp_path: Path) -> None:
    python = str(tmp_path / "python")
    assert strom_invocation({}, which=lambda _: None, executable=python) == (
        f"{python} -m strom.cli.main")
    assert sys.executable  # the default is this interpreter
