"""``strom.testing.kafka_tools.json_lines``: the JSON events a Java program prints, read while it
still writes (Kafka's verifiable tools, e2e/java/TruncationConsumer.java)."""

from __future__ import annotations

from pathlib import Path

from strom.testing.kafka_tools import json_lines


def test_objects_in_order_log_lines_and_a_half_written_last_line_skipped(tmp_path: Path) -> None:
    log = tmp_path / "tool.log"
    assert json_lines(log) == []  # not written yet
    log.write_text('[2026-11-29 07:00:00] INFO starting\n{"event": "record", "offset": 10}\n'
                   '[1, 2]\n{"name": "x"}\n{"event": "rec')
    assert json_lines(log) == [{"event": "record", "offset": 10}, {"name": "x"}]
