"""Record validation on append (Kafka's LogValidator), pure: each rule refuses with its code and
names what is wrong; good batches of every codec pass and report their true max timestamp."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.protocol.batch import validate_batches
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import BatchBuilder, Compression, encode_batch
from strom.protocol.validation import RecordPolicy, validate_records
from strom.storage import LogConfig, PartitionLog

from .poison import NOW, POISON, good, patched

HOUR = 3_600_000


def _validate(records: bytes, policy: RecordPolicy | None = None, now: int = NOW
              ) -> list[int]:
    return validate_records(records, validate_batches(records), policy or RecordPolicy(), now)


def _refused(records: bytes, policy: RecordPolicy | None = None, now: int = NOW
             ) -> StromError:
    with pytest.raises(StromError) as info:
        _validate(records, policy, now)
    return info.value


@pytest.mark.parametrize("compression", list(Compression))
def test_good_batches_of_every_codec_pass(compression: Compression) -> None:
    assert _validate(good(5, compression)) == [NOW]
    assert _validate(good(1, compression) + good(2, compression, ts=NOW - 5)) == [NOW, NOW - 5]


@pytest.mark.parametrize(("name", "code", "fragment"), [
    ("header claims 1 record over 3", ErrorCode.INVALID_RECORD, "does not decode"),
    ("random bytes after a valid header", ErrorCode.INVALID_RECORD, "does not decode"),
    ("gzip attribute on an uncompressed body", ErrorCode.INVALID_RECORD,
     "does not decompress (gzip)"),
    ("client-set control flag", ErrorCode.INVALID_RECORD, "control"),
    ("transactional flag", ErrorCode.INVALID_TXN_STATE, "transactional"),
    ("trailing bytes after the records", ErrorCode.INVALID_RECORD, "does not decode"),
])
def test_poison_batches_are_refused(name: str, code: ErrorCode, fragment: str) -> None:
    poison = POISON[name]()
    validate_batches(poison)  # the header and CRC checks alone let every one of them through
    err = _refused(poison)
    assert err.code is code, err
    assert fragment in err.message and "record batch at byte 0" in err.message


def test_the_bad_batch_is_named_by_its_position() -> None:
    first = good(2)
    err = _refused(first + POISON["header claims 1 record over 3"]())
    assert f"record batch at byte {len(first)}" in err.message


@pytest.mark.parametrize(("field", "fmt", "offset", "value", "fragment"), [
    ("count 0", ">i", 57, 0, "0 records"),
    ("count above the deltas", ">i", 57, 4, "4 records but last offset delta 2"),
    ("count 5 over 3 (deltas agree)", ">i", 57, 5, "5 records"),
    ("producer id below -1", ">q", 43, -7, "producer id -7"),
])
def test_header_fields_must_agree_with_the_records(field: str, fmt: str, offset: int,
                                                   value: int, fragment: str) -> None:
    batch = patched(good(3), fmt, offset, value)
    if field == "count 5 over 3 (deltas agree)":
        batch = patched(batch, ">i", 23, 4)
    err = _refused(batch)
    assert err.code is ErrorCode.INVALID_RECORD
    assert fragment in err.message


def test_idempotent_batches_need_an_epoch_and_a_sequence() -> None:
    for epoch, seq in ((-1, 0), (0, -1)):
        b = BatchBuilder(batch_size=1 << 20, producer_id=5, producer_epoch=epoch,
                         base_sequence=seq)
        b.append(None, b"v", NOW)
        err = _refused(b.build())
        assert err.code is ErrorCode.INVALID_RECORD and "producer id 5" in err.message
    ok = BatchBuilder(batch_size=1 << 20, producer_id=5, producer_epoch=0, base_sequence=0)
    ok.append(None, b"v", NOW)
    assert _validate(ok.build()) == [NOW]


def test_offset_deltas_must_run_from_zero_in_order() -> None:
    # two records whose offset deltas are 0 and 0: rebuild the second record with delta 0 by
    # concatenating two single-record bodies
    one = good(1)
    body = one[61:]
    batch = patched(patched(one[:61] + body + body, ">i", 57, 2), ">i", 23, 1)
    err = _refused(batch)
    assert err.code is ErrorCode.INVALID_RECORD
    assert "record 1 has offset delta 0, expected 1" in err.message


@pytest.mark.parametrize("compression", [c for c in Compression if c])
def test_decompression_is_bounded(compression: Compression) -> None:
    bomb = encode_batch([(b"k", bytes(2 << 20))], compression, timestamp_ms=NOW)
    assert len(bomb) < 200_000  # a small batch of zeros...
    err = _refused(bomb, RecordPolicy(max_decompressed_bytes=1 << 20))  # ...inflates past 1 MiB
    assert err.code is ErrorCode.INVALID_RECORD and "1048576 bytes" in err.message
    assert _validate(bomb) == [NOW]  # within the default bound


def test_codec_ids_kafka_does_not_define_are_refused() -> None:
    err = _refused(patched(good(1), ">h", 21, 5))
    assert err.code is ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_producers_may_not_claim_log_append_time() -> None:
    err = _refused(patched(good(1), ">h", 21, 0x08))
    assert err.code is ErrorCode.INVALID_TIMESTAMP and "LogAppendTime" in err.message


def test_timestamps_outside_the_configured_window_are_refused() -> None:
    err = _refused(good(2, ts=NOW + HOUR + 1))
    assert err.code is ErrorCode.INVALID_TIMESTAMP
    assert "message.timestamp.after.max.ms=3600000" in err.message
    assert _validate(good(2, ts=NOW + HOUR)) == [NOW + HOUR]
    assert _validate(good(2, ts=1)) == [1]  # before.max.ms is unlimited by default (Kafka)
    strict = RecordPolicy(timestamp_before_max_ms=HOUR)
    err = _refused(good(2, ts=NOW - HOUR - 1), strict)
    assert err.code is ErrorCode.INVALID_TIMESTAMP and "before.max.ms" in err.message
    # a LogAppendTime topic replaces timestamps: they are not checked
    assert _validate(good(2, ts=NOW + 10 * HOUR), RecordPolicy(log_append_time=True))


def test_records_without_timestamps_are_not_checked() -> None:
    assert _validate(patched(patched(good(2), ">q", 27, -1), ">q", 35, -1)) == [-1]


def test_compacted_topics_need_keys() -> None:
    compacted = RecordPolicy(compacted=True)
    assert _validate(good(2), compacted) == [NOW]
    err = _refused(encode_batch([(b"k", b"v"), (None, b"w")], timestamp_ms=NOW), compacted)
    assert err.code is ErrorCode.INVALID_RECORD and "offset delta 1 has no key" in err.message
    assert _validate(encode_batch([(None, b"w")], timestamp_ms=NOW))  # only when compacted


def test_the_true_max_timestamp_is_reported() -> None:
    batch = patched(good(3), ">q", 35, NOW - 99)  # a producer's wrong maxTimestamp
    assert _validate(batch) == [NOW]


def test_the_leader_stores_the_true_max_timestamp(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic="t", partition=0,
                            clock=lambda: NOW)
    result = log.append_as_leader(patched(good(3), ">q", 35, NOW - 99), 0)
    assert result.max_timestamp == NOW
    [stored] = validate_batches(log.read(0, 1 << 20).records)  # the CRC was redone
    assert stored.max_timestamp == NOW and stored.base_offset == 0
    log.close()


@pytest.mark.parametrize("name", sorted(POISON))
def test_views_and_bytes_get_the_same_answers(name: str) -> None:
    """The records of a produce request arrive as a view into the request's bytes, which the
    codec reads in place (no copy of each batch): the same answers and errors as the batch's
    own bytes, read-only or writable."""
    for batch in (good(4) + POISON[name](), good(3) + good(2, ts=NOW - 5)):
        framed = b"\x00" * 9 + batch  # the records at an offset inside a larger frame
        answers = []
        for buf in (batch, memoryview(framed)[9:], memoryview(bytearray(framed))[9:]):
            try:
                answers.append(validate_records(buf, validate_batches(buf), RecordPolicy(), NOW))
            except StromError as err:
                answers.append((err.code, err.message))
        assert answers[0] == answers[1] == answers[2], answers
