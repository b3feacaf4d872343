"""The broker's malloc thresholds: when they apply, and that glibc accepts them."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from strom.broker import malloc_tuning
from strom.broker.malloc_tuning import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, plan


def test_plan_sets_both_thresholds_on_glibc() -> None:
    assert plan({}, "glibc") == [(M_MMAP_THRESHOLD, malloc_tuning.MMAP_THRESHOLD_BYTES),
                                 (M_TRIM_THRESHOLD, malloc_tuning.TRIM_THRESHOLD_BYTES)]


@pytest.mark.parametrize("environ", [{"MALLOC_MMAP_THRESHOLD_": "131072"},
                                     {"MALLOC_TRIM_THRESHOLD_": "0"},
                                     {"STROM_MALLOC_TUNING": "0"},
                                     {"STROM_MALLOC_TUNING": "false"}])
def test_operator_settings_win(environ: dict[str, str]) -> None:
    assert plan(environ, "glibc") == []


def test_nothing_to_do_off_glibc() -> None:
    assert plan({}, "") == []
    assert plan({}, "musl") == []


def test_thresholds_keep_default_fetch_buffers_in_the_heap() -> None:
    # The default per-response ReplicaFetch cap is 10 MiB: it must stay below the mmap threshold.
    assert malloc_tuning.MMAP_THRESHOLD_BYTES > 10 * 1_048_576
    assert malloc_tuning.TRIM_THRESHOLD_BYTES >= malloc_tuning.MMAP_THRESHOLD_BYTES


_CHURN = (
    "import resource, sys\n"
    "from strom.broker.malloc_tuning import tune\n"
    "tuned = tune({}) if sys.argv[1] == 'tune' else False\n"
    "def faults(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "def churn():\n"
    "    before = faults()\n"
    "    for _ in range(20):\n"
    "        buffers = [bytes(1 << 20) for _ in range(8)]\n"
    "        del buffers\n"
    "    return faults() - before\n"
    "churn()\n"
    "print(tuned, churn())\n")


def _churn_faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True,
                         timeout=60, check=True, env={"PATH": "/usr/bin:/bin"})
    tuned, faults = out.stdout.split()
    return tuned, int(faults)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_accepts_the_thresholds_and_megabyte_buffers_stop_faulting() -> None:
    # What a broker does per request: several 1 MiB buffers alive at once, then freed. With
    # glibc's defaults the freed top of the heap is trimmed and every round zero-fills fresh
    # pages again (8 x 256 faults per round); with the thresholds the pages are reused.
    tuned, tuned_faults = _churn_faults("tune")
    plain, plain_faults = _churn_faults("plain")
    assert (tuned, plain) == ("True", "False")
    assert tuned_faults < 1_000, tuned_faults
    assert plain_faults > 10 * max(tuned_faults, 100), (plain_faults, tuned_faults)
