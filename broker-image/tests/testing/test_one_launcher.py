"""Strom's servers are launched only through ``strom.testing.process``.

A broker or controller started with a bare ``subprocess.Popen`` has no readiness deadline, no
log tail in its error, no reaping and no ``integration`` marker check; three such launchers of
brokers once drifted apart (issue 16), and two tests and a benchmark had grown new ones. Short
``subprocess.run`` calls of the same entry points (a start-up that must fail) are not launchers.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
#: A ``Popen`` call whose argv list runs ``-m strom.broker`` (or ``strom.controller``), over line
#: breaks. (This comment is worded so that the file does not match itself.)
SERVER = re.compile(r"""Popen\(\s*\[[^\]]*?["']-m["'],\s*["']strom\.(broker|controller)["']""")


def bare_launchers(root: Path) -> list[str]:
    """Tracked Python files under ``root`` that start a Strom server with ``Popen``."""
    out = subprocess.run(["git", "ls-files", "-z", "*.py"], cwd=root, capture_output=True,
                         check=True)
    found = []
    for name in out.stdout.decode().split("\0"):
        path = root / name
        if not name or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if SERVER.search(text):
            found.append(name)
    return found


def test_no_broker_or_controller_is_started_with_a_bare_popen() -> None:
    assert bare_launchers(REPO) == [], (
        "start brokers with strom.testing (BrokerProcess, running_broker, running_cluster) and "
        "controllers with strom.testing.controller.controller_process")
