"""A new active controller fences a killed broker by the refused-port probe, not its session.

Four real brokers on 127.0.0.1 (voters 0, 1, 2; broker 3 an observer), a broker session of
10 s so that a fencing by the session and one by the probe are seconds apart. The active
controller is killed with SIGKILL; as soon as another voter is the active controller, broker 3
is killed too. The new controller inherited both (it never heard either heartbeat to it): the
one that died before it took over is probed as it takes over, the one that died after it once
its heartbeat is two intervals late; both must be fenced on the refusal, long before a
session could have run out (issue 21 items 3, 7: at 10,000 partitions a new controller fenced
a killed broker by its session, 3.08 s; the probe was dropped and begun again on every tick
the loop woke late, so no probe was ever read).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from strom.testing import running_cluster

pytestmark = pytest.mark.integration

SESSION_MS = 10_000
#: A fencing by the session comes at least this long after the kill (the last heartbeat
#: came at most one interval, 200 ms, before it); a probe's fencing must come before.
BY_SESSION_S = SESSION_MS / 1000 - 1.0


def test_a_new_controller_fences_brokers_it_inherited_by_the_probe(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=4, broker_session_timeout_ms=SESSION_MS) as cluster:
        cluster.wait_until(lambda: cluster.controller_id() >= 0, timeout=30,
                           what="an active controller")
        old = cluster.controller_id()
        assert old in cluster.voter_ids
        cluster.kill(old)
        old_killed = time.monotonic()

        def new_controller() -> int | None:
            c = cluster.controller_id()
            return c if c >= 0 and c != old else None

        new = cluster.wait_until(new_controller, timeout=30, what="another active controller")
        victim = 3
        assert victim not in (old, new)
        cluster.kill(victim)
        victim_killed = time.monotonic()

        fenced_at: dict[int, float] = {}

        def both_fenced() -> bool:
            fenced = set(cluster.describe().fenced_broker_ids)
            for b in fenced & {old, victim}:
                fenced_at.setdefault(b, time.monotonic())
            return {old, victim} <= fenced

        cluster.wait_until(both_fenced, timeout=3 * SESSION_MS / 1000, interval=0.05,
                           what=f"brokers {old} and {victim} fenced")
        log = cluster.brokers[new].stderr_path.read_text()
        for b, killed in ((old, old_killed), (victim, victim_killed)):
            lines = [line for line in log.splitlines() if f"fencing broker {b}:" in line]
            assert lines and "refuses connections" in lines[0], (
                f"broker {b} not fenced by the probe: {lines[:1]}")
            took = fenced_at[b] - killed
            assert took < BY_SESSION_S, f"broker {b} fenced {took:.2f} s after its kill"
