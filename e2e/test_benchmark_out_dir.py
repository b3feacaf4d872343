"""``python -m benchmarks --out DIR`` with a directory that does not exist yet: the sections
write their plots into it as each ends, so it is created before the first section runs (a
partition-scale run once ended, after its measurements, in FileNotFoundError on its PNG)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks.__main__``, with the repository root on sys.path for this test only."""
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("benchmarks.__main__")


def test_a_new_out_directory_exists_before_the_first_section(
        bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "new" / "results"
    seen: list[bool] = []

    def section(params: object, results: list[object]) -> None:
        seen.append(bench._plot_dir[0] == out and out.is_dir())
        (out / "plot.png").write_bytes(b"png")  # what a section's plot does

    name = sorted(bench.SECTIONS)[0]
    monkeypatch.setitem(bench.SECTIONS, name, section)
    assert bench.main(["--smoke", "--only", name, "--out", str(out)]) in (0, None)
    assert seen == [True]
    assert (out / "plot.png").exists() and list(out.glob("strom-smoke-*.json"))


def test_an_out_directory_that_cannot_be_made_is_a_usage_error(
        bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    name = sorted(bench.SECTIONS)[0]
    monkeypatch.setitem(bench.SECTIONS, name, lambda params, results: None)
    with pytest.raises(SystemExit) as exited:
        bench.main(["--smoke", "--only", name, "--out", str(blocker / "results")])
    assert exited.value.code == 2
    assert f"--out {blocker / 'results'}: cannot create the directory" in capsys.readouterr().err
