"""The one lag definition, and the client's rows that derive from it."""

from __future__ import annotations

from strom.client.models import GroupPartitionLag
from strom.model.lag import partition_lag


def test_committed_partitions_lag_log_end_minus_committed() -> None:
    assert partition_lag(100, 40) == 60
    assert partition_lag(100, 100) == 0
    assert partition_lag(5, 9) == 0  # a commit ahead of a truncated log is not negative lag


def test_uncommitted_partitions_lag_everything_still_readable() -> None:
    assert partition_lag(100, None, log_start_offset=30) == 70
    assert partition_lag(100, None) == 100


def test_unknown_log_end_is_unknown_lag() -> None:
    assert partition_lag(-1, 5) is None
    assert partition_lag(-1, None, 0) is None


def test_client_rows_use_the_definition() -> None:
    row = GroupPartitionLag("t", 0, committed=None, log_start_offset=30, log_end_offset=100)
    assert row.lag == partition_lag(100, None, 30) == 70
    gone = GroupPartitionLag("t", 1, committed=7, log_start_offset=-1, log_end_offset=-1)
    assert gone.lag is None
