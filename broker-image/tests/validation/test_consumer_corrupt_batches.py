"""A consumer never moves past records it did not deliver (issue 13 items 1 and 5), against a
real broker whose segment file is damaged on disk after the writes.

As Kafka's consumer on CorruptRecordException: ``poll()`` returns the records before the damaged
batch, then raises on every call with the position left at the damaged batch, and auto-commit
commits nothing beyond it, until the application seeks past it. ``check_crcs`` is on by default
(Kafka's ``check.crcs=true``), so a flipped byte inside a value is an error, not data.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.client import Admin, Consumer, Producer, TopicPartition
from strom.protocol.batch import BatchHeader, iter_headers
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import Record
from strom.testing import BrokerProcess, running_broker

pytestmark = pytest.mark.integration

TP = TopicPartition("damaged", 0)
BATCHES = 3
PER_BATCH = 4


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path) as b:
        yield b


def _write_batches(broker: BrokerProcess) -> tuple[Path, list[BatchHeader]]:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(TP.topic)
    with Producer(broker.bootstrap, linger_ms=60_000) as producer:
        for b in range(BATCHES):  # one flush per batch: one batch each on disk
            for i in range(PER_BATCH):
                producer.send(TP.topic, b"value-%d-%d" % (b, i))
            producer.flush(30)
    segment = broker.log_dir / f"{TP.topic}-0" / ("0" * 20 + ".log")
    headers = list(iter_headers(segment.read_bytes()))
    assert [h.records_count for h in headers] == [PER_BATCH] * BATCHES
    return segment, headers


def _damage(segment: Path, position: int) -> None:
    with segment.open("r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x01]))


def _poll_until_error(consumer: Consumer, timeout: float = 30) -> tuple[list[Record],
                                                                        StromError]:
    got: list[Record] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got += consumer.poll(200)
        except StromError as err:
            return got, err
    raise AssertionError(f"no error within {timeout}s; got {[r.value for r in got]}")


def test_a_flipped_value_byte_is_an_error_by_default(broker: BrokerProcess) -> None:
    segment, headers = _write_batches(broker)
    middle = headers[1]
    _damage(segment, middle.position + middle.size - 3)  # inside the last record's value
    with Consumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TP])
        got, err = _poll_until_error(consumer)
        assert err.code is ErrorCode.CORRUPT_MESSAGE and "CRC" in err.message
        assert [r.offset for r in got] == list(range(PER_BATCH))  # the batch before it
        for _ in range(3):  # every poll raises, and the position stays at the damaged batch
            with pytest.raises(StromError):
                consumer.poll(100)
            assert consumer.position(TP) == middle.base_offset
        consumer.seek(TP, middle.next_offset)  # the application skips the damaged batch
        after: list[Record] = []
        deadline = time.monotonic() + 30
        while len(after) < PER_BATCH and time.monotonic() < deadline:
            after += consumer.poll(200)
        assert [r.offset for r in after] == list(range(2 * PER_BATCH, 3 * PER_BATCH))
    # without CRC checks the flipped byte is delivered as data, as Kafka with check.crcs=false
    with Consumer(broker.bootstrap, auto_offset_reset="earliest", check_crcs=False) as lax:
        lax.assign([TP])
        values: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while len(values) < BATCHES * PER_BATCH and time.monotonic() < deadline:
            values += [r.value for r in lax.poll(200)]
    assert len(values) == BATCHES * PER_BATCH
    assert b"value-1-3" not in values


def test_records_that_do_not_decode_stop_the_consumer_and_auto_commit(
        broker: BrokerProcess) -> None:
    segment, headers = _write_batches(broker)
    middle = headers[1]
    _damage(segment, middle.position + 61)  # the first record's length varint
    with Consumer(broker.bootstrap, group_id="g", auto_offset_reset="earliest",
                  enable_auto_commit=True, auto_commit_interval_ms=100,
                  check_crcs=False) as consumer:
        consumer.subscribe([TP.topic])
        got, err = _poll_until_error(consumer, timeout=60)
        assert [r.offset for r in got] == list(range(PER_BATCH))
        time.sleep(0.3)  # auto-commit runs in poll(): give it its interval
        with pytest.raises(StromError):
            consumer.poll(100)
        assert consumer.position(TP) == middle.base_offset
        assert err.code is ErrorCode.CORRUPT_MESSAGE and "does not decode" in err.message
        assert f"seek() to {middle.next_offset}" in err.message
    # close() committed the position: the damaged batch and the one after it are not skipped
    with Admin(broker.bootstrap) as admin:
        committed = admin.list_group_offsets("g")
    assert committed[TP] == middle.base_offset
