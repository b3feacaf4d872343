"""Apache Kafka's own Java programs (its command-line tools, Kafka Streams, Kafka Connect) run
against any cluster -- in particular against a Strom broker's Kafka listener.

Why it exists: "every Kafka client, tool and connector talks to Strom unchanged" (issue 14) is
only shown by running them, and Kafka's Java client is the reference implementation of the
protocol (it checks more than librdkafka does: a null list where Kafka never sends one is a
NullPointerException there). The programs come from the jars :mod:`strom.testing.kafka_jars`
fetched; tools run to completion (:func:`run_tool`), long-running programs (a Streams
application, a Connect worker) through the project's one launcher (:func:`running_java`), so
they are stopped, by pid, when the test ends.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from strom.testing.kafka_jars import ensure_jars, java_binary
from strom.testing.process import ManagedProcess

__all__ = ["TOOL_HEAP", "java_argv", "json_lines", "run_tool", "running_java"]

#: Enough for a tool or a small Streams/Connect process; 2 cores and other tests share the VM.
TOOL_HEAP = ("-Xmx256m",)
#: Kafka's client JVM flags (kafka-run-class.sh), with a fast start for short tools.
_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")


def java_argv(main_class: str, *args: str, heap: Sequence[str] = TOOL_HEAP) -> list[str]:
    """``java -cp <kafka libs>/* MAIN_CLASS ARGS``."""
    return [java_binary(), *heap, *_FLAGS, "-cp", f"{ensure_jars()}/*", main_class, *args]


def run_tool(main_class: str, *args: str, timeout: float = 180.0
             ) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools to completion (``org.apache.kafka.tools.TopicCommand`` ...);
    stdout and stderr captured. A tool that does not end within ``timeout`` raises
    :class:`subprocess.TimeoutExpired` (and is killed)."""
    return subprocess.run(java_argv(main_class, *args), capture_output=True, text=True,
                          timeout=timeout, check=False, stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def running_java(main_class: str, *args: str, log_path: Path, name: str,
                 heap: Sequence[str] = TOOL_HEAP) -> Iterator[ManagedProcess]:
    """A long-running Kafka program (a Streams application, a Connect worker), output in
    ``log_path``, stopped (SIGTERM, then SIGKILL) when the block ends."""
    proc = ManagedProcess(java_argv(main_class, *args, heap=heap), log_path, name=name).start()
    try:
        yield proc
    finally:
        proc.stop()


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects a program printed one a line into ``path`` (Kafka's verifiable tools,
    a test's own Java program), in order; log lines, a missing file and a half-written last
    line are skipped, so a test can read the file while the program still writes it."""
    out: list[dict[str, Any]] = []
    text = path.read_text(errors="replace") if path.exists() else ""
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the last line may be half written
        if isinstance(event, dict):
            out.append(event)
    return out
