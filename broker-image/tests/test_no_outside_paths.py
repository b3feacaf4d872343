"""Nothing in the repository cites a file outside it (docs/architecture.md is the design of
record): a path into the machine the code was written on means nothing to a reader or to CI."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"/work/|\.\./shared\b|\bshared/(DESIGN|TESTING)\.md|\b(DESIGN|TESTING)\.md\b")
TEXT = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".cfg", ".ini", ".json", ".proto", ".txt"}


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [REPO / name for name in out.stdout.decode().split("\0") if name]


def test_no_file_cites_a_path_outside_the_repository() -> None:
    found = []
    for path in _tracked():
        if path.suffix not in TEXT and path.name not in ("Dockerfile", "dev", "run"):
            continue
        if not path.is_file() or path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "cite docs/architecture.md or docs/decisions.md instead:\n" + "\n".join(found)
