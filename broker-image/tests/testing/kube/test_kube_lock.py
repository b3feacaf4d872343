"""The machine-wide cluster lock (no cluster needed): holders read from ``/proc/locks``, a busy
lock fails after the bounded wait naming its holder, and a lock inherited from ``flock(1)`` is
reused instead of waited for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strom.testing.kube import lock

PROC_LOCKS = """\
1: OFDLCK ADVISORY  WRITE -1 fe:00:794738 0 EOF
3: FLOCK  ADVISORY  WRITE 11173 fe:00:794735 0 EOF
4: FLOCK  ADVISORY  WRITE 11330 fe:00:794771 0 EOF
4: -> FLOCK  ADVISORY  WRITE 11400 fe:00:794771 0 EOF
"""


def test_holders_are_the_flock_owners_of_that_inode() -> None:
    assert lock.parse_holders(PROC_LOCKS, 794771) == [11330]
    assert lock.parse_holders(PROC_LOCKS, 794735) == [11173]
    assert lock.parse_holders(PROC_LOCKS, 794738) == []  # an OFD lock, not flock


def test_a_busy_lock_fails_after_the_wait_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "kubestrom.lock"
    holder = subprocess.Popen(["flock", str(path), "sleep", "30"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not (path.exists() and lock.parse_holders(Path("/proc/locks").read_text(),
                                                         path.stat().st_ino)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        start = time.monotonic()
        with pytest.raises(lock.LockBusy) as err, lock.hold(path, wait_s=1.5):
            pass
        assert 1.4 < time.monotonic() - start < 5
        assert str(path) in str(err.value) and "sleep 30" in str(err.value)
        # Without another timer (pytest-timeout's runs here) it blocks in flock, as flock -w.
        code = ("import sys, time\n"
                "from pathlib import Path\n"
                "from strom.testing.kube import lock\n"
                "start = time.monotonic()\n"
                "try:\n"
                f"    with lock.hold(Path({str(path)!r}), wait_s=1.5):\n"
                "        sys.exit(1)\n"
                "except lock.LockBusy:\n"
                "    sys.exit(0 if 1.4 < time.monotonic() - start < 5 else 2)\n")
        blocked = subprocess.run([sys.executable, "-c", code], timeout=30, capture_output=True,
                                 text=True, check=False)
        assert blocked.returncode == 0, blocked.stderr
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # flock and its sleep (which shares the lock)
        holder.wait()
    with lock.hold(path, wait_s=5):  # free again: taken at once
        pass


def test_a_lock_inherited_from_flock_is_reused(tmp_path: Path) -> None:
    path = tmp_path / "kubestrom.lock"
    code = ("import sys, time\n"
            "from pathlib import Path\n"
            "from strom.testing.kube import lock\n"
            "start = time.monotonic()\n"
            f"with lock.hold(Path({str(path)!r}), wait_s=5):\n"
            "    sys.exit(0 if time.monotonic() - start < 2 else 3)\n")
    done = subprocess.run(["flock", str(path), sys.executable, "-c", code], timeout=30,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
