"""Lag: log end minus committed, unknown where nothing is committed, and totals."""

from __future__ import annotations

from strom.groups.lag import group_lag, partition_lag


def test_partition_lag() -> None:
    assert partition_lag(100, 40) == 60
    assert partition_lag(100, 100) == 0
    assert partition_lag(100, None) is None
    assert partition_lag(5, 9) == 0  # a commit ahead of a truncated log is not negative lag


def test_group_lag_totals_and_unknowns() -> None:
    lag = group_lag(
        {("t", 1): 50, ("t", 0): 100, ("u", 0): 10},
        {("t", 0): 90, ("t", 1): None},
    )
    assert [(p.topic, p.partition, p.lag) for p in lag.partitions] == [
        ("t", 0, 10),
        ("t", 1, None),
        ("u", 0, None),
    ]
    assert lag.total == 10
    assert lag.unknown_partitions == 2
    assert lag.by_topic() == {"t": 10, "u": 0}
