"""A process's CPU and wake-ups per thread over a window, from ``/proc`` (issue 21 item 2).

Why per thread and why wake-ups: on this VM the CPU charged for one wake-up grows with how long
the thread slept (~50 us after 10 ms, ~0.3-0.4 ms after 100 ms, ~2.4-3.5 ms after 1 s: cold
caches after a sleep on a virtualised host; the lead's measurement, docs/decisions.md). An idle
process's CPU is then roughly (wake episodes per second, all threads) x (cost of a cold wake),
so a figure of idle CPU means little without the number of wake-ups beside it, and which
thread wakes says which mechanism to look at.

Sources, both kept because they disagree in what they see:

- ``/proc/PID/stat`` fields 14-15 (utime + stime, clock ticks): the whole process, threads
  that exited during the window included, at tick resolution (10 ms);
- ``/proc/PID/task/TID/schedstat``: per live thread, ``run_ns wait_ns slices`` - nanoseconds
  on a CPU, nanoseconds runnable but waiting, and the number of times it was put on a CPU
  (each wake-up of a sleeping thread is one; a preemption and its resumption is another, rare
  in an idle process). A thread that starts inside the window counts from zero; one that ends
  inside it is missing (the stat figure still has its CPU).

Each thread's ``nonvoluntary_ctxt_switches`` (``/proc/PID/task/TID/status``) says how many of
its slices followed a preemption: on a loaded machine those are not wake-ups.

Threads are grouped by name with the digits taken out (``kafka-scheduler-3`` ->
``kafka-scheduler-#``): a JVM has tens of threads of one kind. Names are the kernel's
``comm``, 15 characters at most.

The parsing and the aggregation are pure (:func:`parse_schedstat`, :func:`parse_stat_ticks`,
:func:`parse_involuntary`, :func:`group_name`,
:func:`window`); :func:`sample` is the only function that reads ``/proc``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class ThreadSample:
    name: str
    run_ns: int
    slices: int
    involuntary: int = 0
    """``nonvoluntary_ctxt_switches`` of the thread's ``status``: slices that ended by
    preemption, not by the thread going to sleep (a busy machine's share of ``slices``)."""


@dataclass(frozen=True)
class ProcessSample:
    """One process at one instant: its stat CPU ticks and each live thread's schedstat."""

    ticks: int
    threads: dict[int, ThreadSample]
    """Thread id -> its sample."""


@dataclass
class GroupFigures:
    threads: int
    cpu_pct: float
    wakes_per_s: float


@dataclass
class ProcessWindow:
    """One process over one window: CPU as % of one core, wake episodes per second."""

    cpu_pct: float
    """From ``/proc/PID/stat`` (all threads, exited ones included; tick resolution)."""
    thread_cpu_pct: float
    """Sum over live threads from schedstat (ns resolution)."""
    wakes_per_s: float
    """Sum over live threads of schedstat's third field, per second."""
    threads: int
    preempted_per_s: float = 0.0
    """Of ``wakes_per_s``, the slices that began after a preemption rather than a sleep."""
    groups: dict[str, GroupFigures] = field(default_factory=dict)
    """Thread group (name without digits) -> its figures, busiest first."""

    @property
    def us_per_wake(self) -> float:
        """Charged CPU per wake episode, microseconds (0 when nothing woke)."""
        if self.wakes_per_s <= 0:
            return 0.0
        return self.thread_cpu_pct / 100 / self.wakes_per_s * 1e6


def parse_schedstat(text: str) -> tuple[int, int, int]:
    """``run_ns wait_ns slices`` of a ``schedstat`` file."""
    run_ns, wait_ns, slices = (int(x) for x in text.split()[:3])
    return run_ns, wait_ns, slices


def parse_stat_ticks(text: str) -> int:
    """utime + stime (clock ticks) of a ``/proc/PID/stat`` line; the command name in
    parentheses may hold spaces and parentheses, so the fields are counted after the last
    ``)``."""
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def group_name(comm: str) -> str:
    """A thread's group: its name with every run of digits replaced by ``#``."""
    return _DIGITS.sub("#", comm.strip()) or "?"


def window(before: ProcessSample, after: ProcessSample, seconds: float) -> ProcessWindow:
    """The figures of one process between two samples ``seconds`` apart. A thread only in
    ``after`` counts from zero (it started in the window); one only in ``before`` is left out
    (it ended; its CPU is in ``cpu_pct`` alone)."""
    if seconds <= 0:
        raise ValueError(f"seconds={seconds}: a window has a positive length")
    groups: dict[str, list[float]] = {}
    total_ns = total_slices = total_preempted = 0
    for tid, now in after.threads.items():
        then = before.threads.get(tid)
        run_ns = now.run_ns - (then.run_ns if then else 0)
        slices = now.slices - (then.slices if then else 0)
        total_ns += run_ns
        total_slices += slices
        total_preempted += now.involuntary - (then.involuntary if then else 0)
        g = groups.setdefault(group_name(now.name), [0, 0.0, 0.0])
        g[0] += 1
        g[1] += run_ns
        g[2] += slices
    figures = {name: GroupFigures(int(n), ns / seconds / 1e7, sl / seconds)
               for name, (n, ns, sl) in groups.items()}
    ordered = dict(sorted(figures.items(), key=lambda kv: (-kv[1].cpu_pct, -kv[1].wakes_per_s,
                                                           kv[0])))
    return ProcessWindow(
        cpu_pct=(after.ticks - before.ticks) / CLK_TCK / seconds * 100,
        thread_cpu_pct=total_ns / seconds / 1e7,
        wakes_per_s=total_slices / seconds,
        threads=len(after.threads),
        preempted_per_s=total_preempted / seconds,
        groups=ordered)


def parse_involuntary(status: str) -> int:
    """``nonvoluntary_ctxt_switches`` of a ``status`` file (0 if absent)."""
    for line in status.splitlines():
        if line.startswith("nonvoluntary_ctxt_switches:"):
            return int(line.split(":", 1)[1])
    return 0


def sample(pid: int, proc: Path = Path("/proc")) -> ProcessSample:
    """Read one process's stat and every live thread's schedstat and comm. A thread that
    exits between listing and reading is skipped."""
    ticks = parse_stat_ticks((proc / str(pid) / "stat").read_text())
    threads: dict[int, ThreadSample] = {}
    for task in (proc / str(pid) / "task").iterdir():
        try:
            run_ns, _, slices = parse_schedstat((task / "schedstat").read_text())
            name = (task / "comm").read_text().strip()
            involuntary = parse_involuntary((task / "status").read_text())
        except (FileNotFoundError, ProcessLookupError):
            continue
        threads[int(task.name)] = ThreadSample(name, run_ns, slices, involuntary)
    return ProcessSample(ticks, threads)


def top_groups(w: ProcessWindow, n: int = 6) -> str:
    """The ``n`` busiest groups as ``name cpu% wakes/s`` text, for a progress line."""
    return ", ".join(f"{name} x{g.threads} {g.cpu_pct:.2f}% {g.wakes_per_s:.0f}/s"
                     for name, g in list(w.groups.items())[:n])
