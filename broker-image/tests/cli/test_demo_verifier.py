"""The demo's record layout and its verification of what was read back."""

from __future__ import annotations

import pytest

from strom.cli.demo import Phase, Verifier, make_key, make_value, parse_seq, summary_table
from strom.cli.errors import CliError


def test_values_carry_their_sequence_number_and_have_the_requested_size() -> None:
    for size in (11, 100, 1024):
        value = make_value(42, size)
        assert len(value) == size
        assert parse_seq(value) == 42
    assert parse_seq(b"garbage") == -1
    assert parse_seq(None) == -1
    assert make_key(1005, 1000) == b"key-5"


def placed_three() -> list[tuple[int, int]]:
    # seq 0 -> p0@0, seq 1 -> p1@0, seq 2 -> p0@1
    return [(0, 0), (1, 0), (0, 1)]


def check(v: Verifier, seq: int, partition: int, offset: int) -> None:
    v.check(partition, offset, make_key(seq, 10), make_value(seq, 20))


def test_verifier_accepts_records_at_their_acknowledged_place_in_any_partition_interleaving(
) -> None:
    v = Verifier(placed_three(), keys=10)
    check(v, 1, 1, 0)
    check(v, 0, 0, 0)
    check(v, 2, 0, 1)
    assert v.missing() == 0


def test_verifier_rejects_a_record_at_another_offset() -> None:
    v = Verifier(placed_three(), keys=10)
    with pytest.raises(CliError, match="acknowledged at partition 0 offset 1 but read at"):
        check(v, 2, 0, 5)


def test_verifier_rejects_duplicates_and_reordering() -> None:
    v = Verifier(placed_three(), keys=10)
    check(v, 0, 0, 0)
    with pytest.raises(CliError, match="read twice"):
        check(v, 0, 0, 0)
    v = Verifier([(0, -1), (0, -1)], keys=10)  # offsets unknown (acks=0)
    check(v, 1, 0, 0)
    with pytest.raises(CliError, match="out of send order"):
        check(v, 0, 0, 1)


def test_verifier_rejects_foreign_records_and_wrong_keys() -> None:
    v = Verifier(placed_three(), keys=10)
    with pytest.raises(CliError, match="did not send"):
        v.check(0, 0, b"k", b"hello")
    with pytest.raises(CliError, match="wrong key"):
        v.check(0, 0, b"other", make_value(0, 20))


def test_verifier_counts_what_is_missing() -> None:
    v = Verifier(placed_three(), keys=10)
    check(v, 0, 0, 0)
    assert v.missing() == 2


def test_summary_table_shows_both_phases_and_each_partition() -> None:
    text = summary_table(Phase(1000, 100_000, 0.5), Phase(1000, 100_000, 0.25),
                         {0: (0, 400, 400), 1: (10, 610, 600)})
    assert "produce" in text and "consume" in text
    assert "2000" in text and "4000" in text  # records/s
    assert text.splitlines()[-1].split() == ["1", "10", "610", "600"]
    assert Phase(1, 1, 0).rate == 0.0
