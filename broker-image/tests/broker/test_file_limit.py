"""The broker raises its soft open-file limit to the hard one at start, sizes its segment-file
LRU from it (``log.open.segments.max``), and refuses to start at once, naming the limit and the
setting, when the hard limit cannot hold that cap (issue 21 item 4)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from strom.broker.file_limit import BASE_FILES, FileLimitError, plan_file_limits

INF = resource.RLIM_INFINITY


def test_soft_limit_goes_up_to_the_hard_one() -> None:
    assert plan_file_limits(1024, 20000, 0) == (20000, 15000)
    assert plan_file_limits(20000, 20000, 500) == (20000, 500)
    assert plan_file_limits(1024, INF, 0)[0] == INF
    assert plan_file_limits(INF, INF, 10)[0] == INF


def test_the_derived_cap_leaves_room_for_sockets() -> None:
    target, cap = plan_file_limits(1024, 1024, 0)
    assert target == 1024 and cap == 768
    assert plan_file_limits(256, 512, 0) == (512, 256)


def test_a_cap_above_the_hard_limit_is_refused_naming_it() -> None:
    with pytest.raises(FileLimitError,
                       match=r"log.open.segments.max=20000.*RLIMIT_NOFILE is 20000.*LimitNOFILE"):
        plan_file_limits(1024, 20000, 20000)
    with pytest.raises(FileLimitError, match=r"RLIMIT_NOFILE is 200"):
        plan_file_limits(200, 200, 0)  # not even the base files fit
    assert plan_file_limits(1024, 1024, 1024 - BASE_FILES) == (1024, 1024 - BASE_FILES)


def _limit(soft: int, hard: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.integration
def test_broker_raises_its_soft_limit(tmp_path: Path) -> None:
    code = ("import resource; from strom.broker.file_limit import raise_open_file_limit; "
            "from strom.storage.handles import HANDLES; raise_open_file_limit(); "
            "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], HANDLES.cap)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, preexec_fn=lambda: _limit(256, 1024), check=True)
    assert out.stdout.strip() == "1024 768"


@pytest.mark.integration
def test_broker_refuses_to_start_when_its_segment_cap_cannot_fit(tmp_path: Path) -> None:
    log_dir = tmp_path / "broker-0"
    proc = subprocess.run(
        [sys.executable, "-m", "strom.broker", "--set", "broker.id=0",
         "--set", "host=127.0.0.1", "--set", f"log.dirs={log_dir}",
         "--set", "log.open.segments.max=5000"],
        capture_output=True, text=True, timeout=60, preexec_fn=lambda: _limit(1024, 1024))
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "hard limit RLIMIT_NOFILE is 1024" in proc.stderr
    assert "log.open.segments.max=5000" in proc.stderr
    assert "Traceback" not in proc.stderr
