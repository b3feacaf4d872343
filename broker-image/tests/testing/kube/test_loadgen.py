"""The load generator's verdict (pure): lost, duplicated and reordered records are caught;
its progress lines are read back."""

from __future__ import annotations

from strom.testing.kube import loadgen


def test_ranges_round_trip() -> None:
    values = {0, 1, 2, 5, 7, 8}
    assert loadgen.ranges(values) == [[0, 2], [5, 5], [7, 8]]
    assert loadgen.expand(loadgen.ranges(values)) == values
    assert loadgen.ranges([]) == []


def test_a_clean_read_passes() -> None:
    acked = {"a": {0, 1, 2}, "b": {0, 1}}
    records = [(0, 0, "a:0"), (0, 1, "b:0"), (0, 2, "a:2"), (1, 0, "a:1"), (1, 1, "b:1"),
               (1, 2, "a:3")]  # a:3 was sent but not acknowledged: allowed
    verdict = loadgen.check(acked, records)
    assert verdict["lost_count"] == verdict["duplicate_count"] == 0
    assert verdict["out_of_order_count"] == 0
    assert verdict["read"] == {"a": 4, "b": 2}


def test_lost_duplicated_and_reordered_records_are_named() -> None:
    acked = {"a": {0, 1, 2, 3}}
    records = [(0, 0, "a:0"), (0, 1, "a:2"), (0, 2, "a:1"), (0, 3, "a:2")]
    verdict = loadgen.check(acked, records)
    assert verdict["lost"] == {"a": [[3, 3]]} and verdict["lost_count"] == 1
    assert verdict["duplicate_count"] == 1 and "a:2" in verdict["duplicates"][0]
    assert verdict["out_of_order_count"] == 1  # a:1 after a:2
    offsets = loadgen.check({"a": {0, 1}}, [(0, 5, "a:0"), (0, 5, "a:1")])
    assert offsets["out_of_order_count"] == 1


def test_the_newest_progress_report_is_read_and_a_cut_line_skipped() -> None:
    assert loadgen.last_progress("") is None
    assert loadgen.last_progress('{"source": "host", "sent": 3}\n') is None  # the result only
    output = ('{"progress": {"sent": 10, "acked": 4}}\n'
              '{"progress": {"sent": 20, "acked": 15}}\n'
              '{"progress": {"sent": 3')  # being written
    assert loadgen.last_progress(output) == {"sent": 20, "acked": 15}
