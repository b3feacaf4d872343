"""A broker process does not pay for test-only imports (issue 21 item 5): kio imports
hypothesis whenever it is installed (the dev environment's test dependency, absent from the
broker image) and registers a strategy per type, ~0.3 s of CPU per broker start."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import strom.broker.__main__ as entry
assert "hypothesis" not in sys.modules  # importing the entry point changes nothing
entry.skip_test_only_imports()  # what `python -m strom.broker` does first
import strom.broker.server  # everything a broker imports works without it
import kio.static.primitive
assert sys.modules["hypothesis"] is None, "hypothesis was imported"
print("ok")
"""


def test_a_broker_process_skips_hypothesis_and_still_imports_everything() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]

