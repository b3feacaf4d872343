"""The follower's retry delay grows and stays bounded."""

from __future__ import annotations

from strom.replication.fetcher import backoff_s
from strom.replication.settings import ReplicationSettings


def test_backoff_doubles_and_is_bounded() -> None:
    s = ReplicationSettings(broker_id=1, fetch_backoff_ms=100, fetch_backoff_max_ms=1000)
    assert [backoff_s(n, s) for n in range(6)] == [0.0, 0.1, 0.2, 0.4, 0.8, 1.0]
    assert backoff_s(10_000, s) == 1.0


def test_isr_check_interval_defaults_to_half_the_lag_time() -> None:
    assert ReplicationSettings(broker_id=0).isr_check_interval_s == 5.0
    assert ReplicationSettings(broker_id=0, isr_check_interval_ms=50).isr_check_interval_s == 0.05
