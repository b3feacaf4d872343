"""The idle-CPU benchmark's pure parts (issue 21 item 2): reading ``schedstat`` and ``stat``,
grouping threads, a window's per-thread aggregation, and the per-system summary with its
Strom / Kafka ratio. One test reads the ``/proc`` entries of a child interpreter it starts."""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tc(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks.thread_cpu``, with the repository root on sys.path for this test only (the
    benchmarks package lives beside the workspace packages, as ``python -m benchmarks``)."""
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("benchmarks.thread_cpu")


@pytest.fixture
def idle(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("benchmarks.idle_cpu")


def test_schedstat_is_run_ns_wait_ns_slices(tc: ModuleType) -> None:
    assert tc.parse_schedstat("1287423 63847 4\n") == (1287423, 63847, 4)


def test_stat_ticks_are_counted_after_the_last_parenthesis(tc: ModuleType) -> None:
    # a command name with spaces and parentheses must not shift the fields
    line = ("4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 "
            "37 5 0 0 20 0 9 0 123 456 789")
    assert tc.parse_stat_ticks(line) == 42


def test_threads_are_grouped_by_name_without_digits(tc: ModuleType) -> None:
    assert tc.group_name("kafka-scheduler-3") == "kafka-scheduler-#"
    assert tc.group_name("C2 CompilerThre") == "C# CompilerThre"
    assert tc.group_name("event_engine\n") == "event_engine"
    assert tc.group_name("") == "?"


def _sample(tc: ModuleType, ticks: int, threads: dict[int, tuple[str, int, int]]) -> object:
    return tc.ProcessSample(ticks, {tid: tc.ThreadSample(*t) for tid, t in threads.items()})


def test_a_window_sums_threads_and_groups_them(tc: ModuleType) -> None:
    before = _sample(tc, 100, {1: ("python", 1_000_000_000, 500),
                               2: ("event_engine", 0, 10), 3: ("event_engine", 0, 10),
                               9: ("gone", 5_000_000, 7)})
    after = _sample(tc, 150, {1: ("python", 1_300_000_000, 700),   # +0.3 s, +200 slices
                              2: ("event_engine", 50_000_000, 110),  # +0.05 s, +100
                              3: ("event_engine", 50_000_000, 60),   # +0.05 s, +50
                              4: ("new-thread-1", 100_000_000, 40)})  # born in the window
    w = tc.window(before, after, 10.0)
    assert w.cpu_pct == pytest.approx(50 / tc.CLK_TCK / 10 * 100)
    assert w.thread_cpu_pct == pytest.approx(5.0)  # 0.5 s over 10 s; thread 9 left out
    assert w.wakes_per_s == pytest.approx(39.0)  # 390 slices over 10 s
    assert w.threads == 4
    # busiest first; a tie in CPU goes to the group that woke more
    assert list(w.groups) == ["python", "event_engine", "new-thread-#"]
    assert w.groups["event_engine"] == tc.GroupFigures(2, pytest.approx(1.0),
                                                       pytest.approx(15.0))
    assert w.us_per_wake == pytest.approx(0.05 / 39 * 1e6)


def test_a_window_needs_a_positive_length_and_nothing_woken_costs_nothing(tc: ModuleType
                                                                         ) -> None:
    s = _sample(tc, 0, {1: ("python", 10, 1)})
    with pytest.raises(ValueError):
        tc.window(s, s, 0.0)
    assert tc.window(s, s, 1.0).us_per_wake == 0.0


_SPINNER = r"""
import sys, threading, time

def spin() -> None:
    print(threading.get_native_id(), flush=True)
    end = time.thread_time() + 0.2
    while time.thread_time() < end:
        pass
    sys.stdin.readline()

sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.readline()
threading.Thread(target=spin).start()
"""


def test_sampling_a_process_sees_its_busy_thread(tc: ModuleType) -> None:
    """Real ``/proc``: in a fresh interpreter, a thread that spins 0.2 s of its own CPU shows
    at least that in its schedstat (found by its native id; Python 3.11 does not name OS
    threads), with at least one slice, and the process's stat figure agrees with the threads'
    sum within 0.1 s.

    Why a child and not this process: the pytest process carries earlier tests' threads, and
    one that ends inside the window leaves its CPU in the process's stat but not in any live
    thread's schedstat (ci12: 0.13 s apart)."""
    child = subprocess.Popen([sys.executable, "-c", _SPINNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        before = tc.sample(child.pid)
        start = time.monotonic()
        child.stdin.write("go\n")
        child.stdin.flush()
        tid = int(child.stdout.readline())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            after = tc.sample(child.pid)
            spun = after.threads.get(tid)
            if spun is not None and spun.run_ns >= 190_000_000:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"the spinning thread's CPU never showed: {after}")
        assert spun.slices >= 1 and tid not in before.threads
        seconds = time.monotonic() - start
        w = tc.window(before, after, seconds)
        assert w.thread_cpu_pct * seconds / 100 >= 0.19
        assert abs(w.cpu_pct - w.thread_cpu_pct) * seconds / 100 < 0.1
    finally:
        child.stdin.write("stop\n")
        child.stdin.close()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)
        child.stdout.close()


def _pw(tc: ModuleType, cpu: float, wakes: float, threads: int = 5) -> object:
    return tc.ProcessWindow(cpu_pct=cpu, thread_cpu_pct=cpu, wakes_per_s=wakes,
                            threads=threads)


def test_the_summary_gives_each_systems_mean_broker_and_the_ratio(idle: ModuleType,
                                                                  tc: ModuleType) -> None:
    windows = [
        idle.Window({0: 2.0, 1: 4.0}, 1.0, 20.0,
                    {"strom-0": _pw(tc, 2.0, 100), "strom-1": _pw(tc, 4.0, 300),
                     "kafka-0": _pw(tc, 8.0, 400), "kafka-1": _pw(tc, 12.0, 600),
                     "null-10hz": _pw(tc, 0.05, 10, 1)}),
        idle.Window({0: 3.0, 1: 5.0}, 1.0, 20.0,
                    {"strom-0": _pw(tc, 3.0, 100), "strom-1": _pw(tc, 5.0, 300),
                     "kafka-0": _pw(tc, 10.0, 500), "kafka-1": _pw(tc, 14.0, 700),
                     "null-10hz": _pw(tc, 0.07, 10, 1)}),
        idle.Window({0: 9.0, 1: 9.0}, 1.0, 20.0,
                    {"strom-0": _pw(tc, 9.0, 900), "strom-1": _pw(tc, 9.0, 900),
                     "kafka-0": _pw(tc, 9.0, 900), "kafka-1": _pw(tc, 11.0, 900),
                     "null-10hz": _pw(tc, 0.06, 10, 1)}),
    ]
    s = idle.summarise(windows)
    assert s["strom (mean broker)"]["cpu_pct"] == pytest.approx(4.0)  # median of 3, 4, 9
    assert s["kafka (mean broker)"]["cpu_pct"] == pytest.approx(10.0)  # of 10, 12, 10
    assert s["kafka (mean broker)"]["wakes_per_s"] == pytest.approx(600)
    assert s["strom / kafka"]["cpu_pct"] == pytest.approx(0.4)
    assert s["strom / kafka"]["wakes_per_s"] == pytest.approx(200 / 600)
    assert s["null-10hz"]["cpu_pct"] == pytest.approx(0.06)
    assert s["null-10hz"]["us_per_wake"] == pytest.approx(60)  # 0.06 % of a core at 10/s
    # without Kafka there is no ratio (and no Kafka row)
    alone = idle.summarise([idle.Window({}, 1.0, 20.0, {"strom-0": _pw(tc, 2.0, 100)})])
    assert set(alone) == {"strom-0", "strom (mean broker)"}


def test_kafka_is_full_when_every_partition_has_a_leader_and_three_in_isr(idle: ModuleType
                                                                         ) -> None:
    full = {0: (1, (0, 1, 2)), 1: (2, (0, 1, 2))}
    assert idle.kafka_full(full, 2)
    assert not idle.kafka_full(full, 3)
    assert not idle.kafka_full({**full, 1: (-1, (0, 1, 2))}, 2)
    assert not idle.kafka_full({**full, 1: (2, (1, 2))}, 2)
    assert not idle.kafka_full(None, 0)


def test_kafka_gets_the_topic_in_steps_its_controller_accepts(idle: ModuleType) -> None:
    assert idle.kafka_creation_steps(10) == [10]
    assert idle.kafka_creation_steps(5_000) == [5_000]
    assert idle.kafka_creation_steps(10_000) == [5_000, 10_000]
    assert idle.kafka_creation_steps(12_001) == [5_000, 10_000, 12_001]


def test_preemptions_are_read_from_status_and_counted_apart(tc: ModuleType) -> None:
    status = ("Name:\tpython\nvoluntary_ctxt_switches:\t120\n"
              "nonvoluntary_ctxt_switches:\t7\n")
    assert tc.parse_involuntary(status) == 7
    assert tc.parse_involuntary("Name:\tpython\n") == 0
    before = tc.ProcessSample(0, {1: tc.ThreadSample("python", 0, 100, 7)})
    after = tc.ProcessSample(0, {1: tc.ThreadSample("python", 0, 140, 17),
                                 2: tc.ThreadSample("new", 0, 20, 5)})
    w = tc.window(before, after, 5.0)
    assert w.wakes_per_s == pytest.approx(12.0)  # 60 slices
    assert w.preempted_per_s == pytest.approx(3.0)  # 15 of them after a preemption
