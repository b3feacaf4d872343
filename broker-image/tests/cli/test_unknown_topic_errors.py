"""Operational errors from a real broker: exit 1, one line, no traceback."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("argv,stdin", [
    (["consume", "nope", "--max-messages", "1", "--timeout-ms", "1000"], None),
    (["offsets", "nope"], None),
    (["topic", "describe", "nope"], None),
    (["topic", "delete", "nope"], None),
    (["topic", "alter", "nope", "--config", "retention.ms=1"], None),
    (["topic", "add-partitions", "nope", "--partitions", "4"], None),
    (["produce", "nope"], "x\n"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_unknown_topic_is_exit_1_with_one_line(argv: list[str], stdin: str | None,
                                               strom: Any, broker: Any) -> None:
    r = strom(*argv, "--bootstrap-server", broker.bootstrap, input=stdin, timeout=60)
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("strom: error: UNKNOWN_TOPIC_OR_PARTITION")
    assert "nope" in lines[0]
    assert "Traceback" not in r.stderr


def test_bad_topic_config_is_exit_1_naming_the_key(strom: Any, broker: Any) -> None:
    r = strom("topic", "create", "t", "--config", "retention.ms=soon",
              "--bootstrap-server", broker.bootstrap)
    assert r.returncode == 1
    assert r.stderr.startswith("strom: error: INVALID_CONFIG")
    assert "retention.ms" in r.stderr
    assert len(r.stderr.splitlines()) == 1
