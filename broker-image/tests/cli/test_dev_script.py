"""The root ``./dev`` script (the README's two commands) and ``.ci/run``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_scripts_are_executable_bash_with_valid_syntax() -> None:
    for path in (REPO / "dev", REPO / ".ci" / "run"):
        assert os.access(path, os.X_OK), path
        assert path.read_text().startswith("#!/usr/bin/env bash\n")
        subprocess.run(["bash", "-n", str(path)], check=True)


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "set -euo pipefail" in ci
    assert "./dev test" in ci
    readme = (REPO / "README.md").read_text()
    assert "./dev demo" in readme and "./dev test" in readme


def test_dev_help_and_unknown_commands() -> None:
    result = subprocess.run([str(REPO / "dev"), "help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "./dev demo" in result.stdout and "./dev test" in result.stdout
    result = subprocess.run([str(REPO / "dev"), "nope"], capture_output=True, text=True)
    assert result.returncode == 1
    assert "unknown command 'nope'" in result.stderr


def test_dev_test_runs_every_check_and_pins_uv() -> None:
    script = (REPO / "dev").read_text()
    for needle in ("ruff check", "mypy --strict", "lint-imports", "pytest",
                   "uv sync --all-packages --locked", 'UV_VERSION="0.13.9"', "-m venv .tools"):
        assert needle in script, needle


def test_readme_commands_write_no_untracked_files_into_the_repo() -> None:
    """Files the README's commands write (``--plan-file``) go where git ignores them: following
    the quickstart must not leave an untracked file in the repository root (issue 12)."""
    ignored = [line.strip().rstrip("/") for line in
               (REPO / ".gitignore").read_text().splitlines()
               if line.strip() and not line.startswith(("#", "!"))]
    readme = (REPO / "README.md").read_text().split()
    written = [readme[i + 1] for i, word in enumerate(readme[:-1]) if word == "--plan-file"]
    assert written, "the README's reassignment quickstart writes a plan file"
    for path in written:
        assert path.startswith("/") or path.split("/")[0] in ignored, (
            f"README writes {path} into the repository; put it under a git-ignored dir")


def test_the_test_count_comment_is_not_a_stale_figure() -> None:
    """The ./dev comment said ~1,470 tests in 3-4 minutes long after both were wrong."""
    text = (REPO / "dev").read_text()
    assert "~1,470 tests" not in text and "3-4 minutes" not in text
    assert "--collect-only" in text  # it says how to measure instead
