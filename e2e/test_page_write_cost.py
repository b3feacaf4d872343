"""The page-write benchmark's parts (``benchmarks.page_write_cost``): the per-write arithmetic,
a small real run of each method in a temporary directory, and its refusals."""

from __future__ import annotations

import importlib
import resource
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def pwc(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks.page_write_cost``, with the repository root on sys.path for this test."""
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("benchmarks.page_write_cost")


def _usage(stime: float, majflt: int) -> resource.struct_rusage:
    fields = [0.0, stime] + [0] * 14
    fields[7] = majflt  # ru_majflt (after utime, stime, maxrss, ixrss, idrss, isrss, minflt)
    return resource.struct_rusage(fields)


def test_per_write_divides_the_differences(pwc: ModuleType) -> None:
    wall, system, faults = pwc.per_write(_usage(1.0, 10), _usage(1.5, 110), 2.0, 100)
    assert wall == pytest.approx(20_000.0)
    assert system == pytest.approx(5_000.0)
    assert faults == pytest.approx(1.0)


@pytest.mark.parametrize("method", ["mmap", "pwrite"])
def test_a_small_run_writes_each_file_once_and_cleans_up(
        pwc: ModuleType, tmp_path: Path, method: str) -> None:
    row = pwc.measure(tmp_path, method, files=3, size=8192)
    assert row.method == method and row.files == 3
    assert row.wall_us > 0 and row.system_us >= 0 and row.major_faults >= 0
    assert row.filesystem not in ("", "?")
    assert list(tmp_path.iterdir()) == []  # its files went with its directory


def test_unknown_method_and_bad_arguments_are_refused(pwc: ModuleType, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="mmap or pwrite"):
        pwc.measure(tmp_path, "sendfile", files=1, size=8192)
    with pytest.raises(ValueError, match="files must be at least 1"):
        pwc.measure(tmp_path, "mmap", files=0, size=8192)
    with pytest.raises(SystemExit) as exit_info:
        pwc.main(["--files", "0"])
    assert exit_info.value.code == 2
    assert "--files must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pwc.main(["--dirs", str(tmp_path / "missing")])
    assert "is not a directory" in capsys.readouterr().err
