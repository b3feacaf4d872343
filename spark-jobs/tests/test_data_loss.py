"""Offsets deleted by retention: a clear error under failOnDataLoss=true, a skip otherwise."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_deleted_offsets_fail_or_are_skipped(spark: Any, broker: str, topic_name: str,
                                             helpers: Any) -> None:
    from strom.client import Consumer, TopicPartition

    helpers.create_topic(broker, topic_name, 1, {"segment.bytes": "1024",
                                                 "retention.bytes": "2048"})
    for i in range(20):  # several small segments, so retention can delete the oldest ones
        helpers.produce(broker, topic_name, [(None, b"x" * 200 + b"%d" % i)])
    tp = TopicPartition(topic_name, 0)
    with Consumer(broker) as consumer:
        deadline = time.monotonic() + 30
        while (log_start := consumer.beginning_offsets([tp])[tp]) == 0:
            if time.monotonic() > deadline:
                raise AssertionError("the broker did not apply retention.bytes=2048 within 30 s: "
                                     "the log still starts at offset 0")
            time.sleep(0.5)
        end = consumer.end_offsets([tp])[tp]

    def load(fail: str) -> Any:
        return (spark.read.format("strom").option("bootstrap.servers", broker)
                .option("subscribe", topic_name)
                .option("startingOffsets", json.dumps({topic_name: {"0": 0}}))
                .option("failOnDataLoss", fail).load())

    # Retention runs in the background and may delete more segments while the test runs, so
    # the checks allow the log start to have moved on (never back) since it was observed.
    with pytest.raises(Exception, match=rf"{topic_name}-0 offset 0: offsets \[0, \d+\) "
                                        r"were deleted .*failOnDataLoss=false"):
        load("true").collect()
    offsets = sorted(r.offset for r in load("false").select("offset").collect())
    assert offsets, "the records that survived retention are read"
    assert offsets[0] >= log_start
    assert offsets == list(range(offsets[0], end))
