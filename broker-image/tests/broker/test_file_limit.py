"""The broker raises its soft open-file limit to the hard one at start, and refuses to start at
once, naming the limit, when the partitions in its log dirs cannot fit (issue 21 item 4)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from strom.broker.file_limit import (
    FileLimitError,
    count_partitions,
    files_needed,
    plan_soft_limit,
)

INF = resource.RLIM_INFINITY


def test_soft_limit_goes_up_to_the_hard_one() -> None:
    assert plan_soft_limit(1024, 20000, files_needed(100)) == 20000
    assert plan_soft_limit(20000, 20000, 500) == 20000
    assert plan_soft_limit(1024, INF, 10**6) == INF
    assert plan_soft_limit(INF, INF, 10) == INF


def test_a_need_above_the_hard_limit_is_refused_naming_it() -> None:
    with pytest.raises(FileLimitError, match=r"RLIMIT_NOFILE is 20000.*LimitNOFILE"):
        plan_soft_limit(1024, 20000, files_needed(10_000))


def test_count_partitions_counts_partition_dirs_only(tmp_path: Path) -> None:
    (tmp_path / "a" / "t-0").mkdir(parents=True)
    (tmp_path / "a" / "t-1").mkdir()
    (tmp_path / "a" / "__cluster_metadata").mkdir()
    (tmp_path / "a" / "x-1.deleting").mkdir()
    (tmp_path / "b" / "u-7").mkdir(parents=True)
    (tmp_path / "a" / "meta.properties").write_text("")
    assert count_partitions([tmp_path / "a", tmp_path / "b", tmp_path / "missing"]) == 3


def _limit(soft: int, hard: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.integration
def test_broker_raises_its_soft_limit(tmp_path: Path) -> None:
    code = ("import resource; from strom.broker.file_limit import raise_open_file_limit; "
            f"raise_open_file_limit([__import__('pathlib').Path({str(tmp_path)!r})]); "
            "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, preexec_fn=lambda: _limit(256, 1024), check=True)
    assert out.stdout.strip() == "1024"


@pytest.mark.integration
def test_broker_refuses_to_start_when_its_partitions_cannot_fit(tmp_path: Path) -> None:
    log_dir = tmp_path / "broker-0"
    for p in range(400):  # 256 + 3 * 400 = 1456 files > hard limit 1024
        (log_dir / f"t-{p}").mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-m", "strom.broker", "--set", "broker.id=0",
         "--set", "host=127.0.0.1", "--set", f"log.dirs={log_dir}"],
        capture_output=True, text=True, timeout=60, preexec_fn=lambda: _limit(1024, 1024))
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "hard limit RLIMIT_NOFILE is 1024" in proc.stderr
    assert "Traceback" not in proc.stderr
