"""Kafka's own command-line tools (its Java clients) against Apache Kafka and against Strom.

The tools' outputs are compared line by line after removing what must differ (topic ids):
TopicCommand (create, describe), ConsoleProducer and
ConsoleConsumer (keys, values, partitions and offsets), GetOffsetShell, ConsumerGroupCommand
(committed offsets and lag of the console consumer's group) and ConfigCommand (a topic's
dynamic configs). Every tool is a JVM: the scenario is one test so the JVM starts stay few.
"""

from __future__ import annotations

import pprint
import re
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

# ~14 JVM starts: about 2.5 min at load 16-20 on 2 cores, over 400 s at load 28
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

TOOLS = "org.apache.kafka.tools."
#: A tool's JVM: small heap, C1 only (they run for seconds; start-up dominates).
TOOL_JVM = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


#: The tools log only warnings, to stderr: what is compared is what they print for a user.
TOOL_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
"""


def tool(pair: Any, main_class: str, *args: str, stdin: str | None = None,
         timeout: float = 90) -> tuple[int, str]:
    """Run one tool with the reference's jars; (exit code, stdout and stderr)."""
    log4j = pair.kafka_cluster.root / "tools-log4j2.properties"
    if not log4j.exists():
        log4j.write_text(TOOL_LOG4J2)
    argv = [f"-Dlog4j2.configurationFile={log4j}" if a.startswith("-Dlog4j2.") else a
            for a in pair.kafka_cluster.java_argv(main_class, *args, heap=TOOL_JVM)
            if a not in ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                         "-XX:InitiatingHeapOccupancyPercent=35")]
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False)
    return done.returncode, done.stdout + done.stderr


def normal(text: str, topic_id: bool = True) -> list[str]:
    """Output lines without log lines, blank lines and run-specific ids, spaces collapsed."""
    lines = []
    for line in text.splitlines():
        if re.match(r"^\[\d{4}-", line) or not line.strip():
            continue
        if topic_id:
            line = re.sub(r"TopicId: \S+", "TopicId: -", line)
        lines.append(" ".join(line.split()))
    return lines


def scenario(pair: Any, bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    server = ("--bootstrap-server", bootstrap)
    code, out = tool(pair, TOOLS + "TopicCommand", *server, "--create", "--topic", topic,
                     "--partitions", "2", "--replication-factor", "1",
                     "--config", "retention.ms=3600000")
    seen["create"] = (code, normal(out))
    code, out = tool(pair, TOOLS + "TopicCommand", *server, "--describe", "--topic", topic)
    # Kafka 4.x (eligible leader replicas on) keeps a cluster-wide min.insync.replicas, which
    # every topic then lists as a non-default config; Strom has no ELR (docs/kafka-protocol.md)
    seen["describe"] = (code, [line.replace("min.insync.replicas=1,", "")
                               for line in normal(out)])
    lines = "".join(f"k{i}:v{i}\n" for i in range(10))
    code, out = tool(pair, TOOLS + "ConsoleProducer", *server, "--topic", topic,
                     "--property", "parse.key=true", "--property", "key.separator=:",
                     "--producer-property", "acks=all", stdin=lines)
    seen["produce"] = (code, normal(out))
    code, out = tool(pair, TOOLS + "consumer.ConsoleConsumer", *server, "--topic", topic,
                     "--group", group, "--from-beginning", "--max-messages", "10",
                     "--timeout-ms", "30000", "--property", "print.key=true",
                     "--property", "print.partition=true", "--property", "print.offset=true",
                     "--command-property", "auto.offset.reset=earliest")
    seen["consume"] = (code, sorted(normal(out)))
    code, out = tool(pair, TOOLS + "GetOffsetShell", *server, "--topic", topic)
    seen["offsets"] = (code, sorted(normal(out)))
    code, out = tool(pair, TOOLS + "consumer.group.ConsumerGroupCommand", *server,
                     "--describe", "--group", group, "--offsets")
    seen["group"] = (code, sorted(normal(out)))
    code, out = tool(pair, "kafka.admin.ConfigCommand", *server, "--describe",
                     "--entity-type", "topics", "--entity-name", topic)
    # Kafka 4.3.1 lists only the override as a synonym here; Strom also lists the broker key's
    # built-in default (DEFAULT_CONFIG:log.retention.ms=...): a difference written in
    # docs/kafka-protocol.md, taken out of the comparison
    seen["configs"] = (code, [re.sub(r", DEFAULT_CONFIG:[^,}]*", "", line)
                              for line in normal(out)])
    return seen


def test_kafka_tools_see_the_same(pair: Any, name: Callable[[str], str]) -> None:
    topic, group = name("tools"), name("g")
    kafka = scenario(pair, pair.kafka.bootstrap, topic, group)
    strom = scenario(pair, pair.strom.bootstrap, topic, group)
    diffs = {key: (kafka[key], strom[key]) for key in kafka if strom[key] != kafka[key]}
    assert diffs == {}, pprint.pformat(diffs, width=100)
    assert kafka["create"][0] == 0
    assert len([line for line in kafka["consume"][1] if line.startswith("Partition:")]) == 10
    assert sum(int(line.rsplit(":", 1)[1]) for line in kafka["offsets"][1]) == 10
