"""The idempotent producer against the fake cluster: defaults, stamping, retries, epoch bumps."""

from __future__ import annotations

import pytest

from strom.client import ErrorCode, Producer, StromError
from strom.client.sender import ProducerSettings
from strom.protocol.batch import BatchHeader, parse_header

from .conftest import FakeCluster


def _produced_headers(cluster: FakeCluster) -> list[BatchHeader]:
    """The header of every batch every Produce call carried, in call order."""
    return [parse_header(pd.records) for _, rpc, req in cluster.calls if rpc == "Produce"
            for pd in req.partitions]


def test_defaults_are_acks_all_with_idempotence() -> None:
    s = ProducerSettings.build("127.0.0.1:9092")
    assert (s.acks, s.idempotence) == (-1, True)
    assert ProducerSettings.build("h:1", acks="all").idempotence
    for acks in (0, 1, "1"):
        s = ProducerSettings.build("h:1", acks=acks)
        assert not s.idempotence  # an explicit acks 0/1 turns the default off, as in Kafka
    assert not ProducerSettings.build("h:1", enable_idempotence=False).idempotence
    with pytest.raises(ValueError, match=r"enable_idempotence.*acks"):
        ProducerSettings.build("h:1", acks=1, enable_idempotence=True)
    with pytest.raises(StromError) as info:
        ProducerSettings.build("h:1", acks=0, enable_idempotence=True)
    assert info.value.code is ErrorCode.INVALID_CONFIG
    assert not ProducerSettings.build("h:1", retries=0).idempotence
    with pytest.raises(ValueError, match="retries"):
        ProducerSettings.build("h:1", retries=0, enable_idempotence=True)


def test_batches_carry_producer_id_epoch_and_consecutive_sequences(
        fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 2)
    with Producer(fake_cluster.bootstrap, linger_ms=0, batch_size=200) as p:
        for i in range(40):
            p.send("t", b"value-%03d" % i, partition=i % 2)
        p.flush(10)
    inits = [req for _, rpc, req in fake_cluster.calls if rpc == "InitProducerId"]
    assert len(inits) == 1 and inits[0].producer_id == -1
    headers = _produced_headers(fake_cluster)
    assert {(h.producer_id, h.producer_epoch) for h in headers} == {(1001, 0)}
    for partition in (0, 1):
        seqs = [(h.base_sequence, h.records_count) for _, rpc, req in fake_cluster.calls
                if rpc == "Produce" for pd in req.partitions if pd.partition == partition
                for h in [parse_header(pd.records)]]
        expected = 0
        for seq, count in seqs:
            assert seq == expected
            expected += count
        assert expected == 20


def test_non_idempotent_producer_sends_no_producer_id(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    with Producer(fake_cluster.bootstrap, acks=1) as p:
        p.send("t", b"x").result(10)
    assert all(rpc != "InitProducerId" for _, rpc, _ in fake_cluster.calls)
    assert [h.producer_id for h in _produced_headers(fake_cluster)] == [-1]


def test_retry_after_lost_answer_resends_the_same_bytes(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    fake_cluster.lost_answers[("t", 0)] = 1
    with Producer(fake_cluster.bootstrap, retry_backoff_ms=5) as p:
        p.send("t", b"x").result(10)
    sent = [pd.records for _, rpc, req in fake_cluster.calls if rpc == "Produce"
            for pd in req.partitions]
    assert len(sent) == 2 and sent[0] == sent[1]  # same sequence: the broker de-duplicates


def test_out_of_order_fails_the_batch_and_bumps_the_epoch(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    fake_cluster.faults[("Produce", "t", 0)] = [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
    with Producer(fake_cluster.bootstrap, retry_backoff_ms=5) as p:
        with pytest.raises(StromError) as info:
            p.send("t", b"lost").result(10)
        assert info.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert p.send("t", b"next").result(10).offset == 0
    headers = _produced_headers(fake_cluster)
    assert [(h.producer_epoch, h.base_sequence) for h in headers] == [(0, 0), (1, 0)]
    inits = [req for _, rpc, req in fake_cluster.calls if rpc == "InitProducerId"]
    assert [(r.producer_id, r.producer_epoch) for r in inits] == [(-1, -1)]  # bumped locally


def test_unknown_producer_is_restamped_under_a_new_epoch(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    fake_cluster.faults[("Produce", "t", 0)] = [ErrorCode.UNKNOWN_PRODUCER_ID]
    with Producer(fake_cluster.bootstrap, retry_backoff_ms=5) as p:
        assert p.send("t", b"x").result(10).offset == 0
    headers = _produced_headers(fake_cluster)
    assert [(h.producer_epoch, h.base_sequence) for h in headers] == [(0, 0), (1, 0)]


def test_init_producer_id_retries_retriable_errors(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    fake_cluster.call_faults["InitProducerId"] = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 2
    with Producer(fake_cluster.bootstrap, retry_backoff_ms=5) as p:
        assert p.send("t", b"x").result(10).offset == 0


def test_init_producer_id_fatal_error_fails_the_sends(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    fake_cluster.call_faults["InitProducerId"] = [ErrorCode.INVALID_REQUEST]
    with (Producer(fake_cluster.bootstrap, retry_backoff_ms=5) as p,
          pytest.raises(StromError, match="enable_idempotence=False")):
        p.send("t", b"x").result(10)


def test_duplicate_sequence_answer_counts_as_success(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    fake_cluster.faults[("Produce", "t", 0)] = [ErrorCode.DUPLICATE_SEQUENCE_NUMBER]
    with Producer(fake_cluster.bootstrap) as p:
        p.send("t", b"x").result(10)  # no error: the broker already has the batch (as Kafka)
        assert p.send("t", b"y").result(10).offset == 0
    headers = _produced_headers(fake_cluster)
    assert [(h.producer_epoch, h.base_sequence) for h in headers] == [(0, 0), (0, 1)]
