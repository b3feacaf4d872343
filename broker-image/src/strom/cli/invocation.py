"""How the user runs ``strom`` from their own shell, for the commands our hints print.

``./dev demo`` and ``uv run strom ...`` run inside ``uv run``, whose PATH holds the project's
venv; the user's shell usually does not, so a hint saying ``strom consume ...`` fails there with
"command not found". Under ``uv run`` (uv sets ``UV_RUN_RECURSION_DEPTH``) the hint says
``uv run strom`` (as the README does); when the shell's PATH finds this very script, ``strom``;
otherwise the script's full path, which works from anywhere.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path


def strom_invocation(env: Mapping[str, str] | None = None,
                     which: Callable[[str], str | None] = shutil.which,
                     executable: str = sys.executable) -> str:
    env = os.environ if env is None else env
    if env.get("UV_RUN_RECURSION_DEPTH"):
        return "uv run strom"
    script = Path(executable).parent / "strom"
    found = which("strom")
    if found is not None and Path(found).resolve() == script.resolve():
        return "strom"
    if script.exists():
        return str(script)
    return f"{executable} -m strom.cli.main"
