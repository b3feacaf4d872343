"""``partition.metadata``: the topic id a partition directory belongs to (Kafka's
PartitionMetadataFile).

A topic deleted and created again under the same name must not adopt the old topic's log, so
each partition directory records its topic id; the broker compares it with the metadata before
it uses the log. The log reads it when it opens (in the log manager's threads at start-up), so
publishing 10,000 partitions at a restart reads no file per partition on the event loop
(issue 21 item 5).
"""

from __future__ import annotations

import os
from pathlib import Path

PARTITION_METADATA = "partition.metadata"


def read_topic_id(directory: Path | str) -> str | None:
    try:  # os.path, not pathlib: read for every partition at start
        with open(os.path.join(directory, PARTITION_METADATA), encoding="utf-8") as f:
            text = f.read()
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id":
                return value.strip()
    except OSError:
        return None
    return None


def write_topic_id(directory: Path, topic_id: str) -> None:
    (directory / PARTITION_METADATA).write_text(f"version: 0\ntopic_id: {topic_id}\n",
                                                encoding="utf-8")
