"""``strom`` against an address where nothing listens: one error line, exit 1, in about a second.

Issue 12.3: ``strom topic list --bootstrap-server 127.0.0.1:9999`` used to wait out the whole
request timeout (~10.6 s) before saying the broker was unreachable.
"""

from __future__ import annotations

import subprocess
import time

import pytest


@pytest.mark.integration
def test_cli_prints_one_line_and_exits_1_quickly(refused_address: str,
                                                  strom_cmd: list[str]) -> None:
    start = time.monotonic()
    done = subprocess.run([*strom_cmd, "topic", "list", "--bootstrap-server", refused_address,
                           "--request-timeout-ms", "30000"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    elapsed = time.monotonic() - start
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "cannot connect to any bootstrap server" in lines[0]
    assert refused_address in lines[0]
    assert elapsed < 15, f"took {elapsed:.1f} s (request timeout 30 s)"


