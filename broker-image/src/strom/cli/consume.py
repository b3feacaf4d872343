"""``strom consume``: the console consumer. One record per line on stdout.

Like kafka-console-consumer: starts at the end unless ``--from-beginning`` or ``--offset N
--partition P``; stops after ``--max-messages`` or when ``--timeout-ms`` passes without a record;
Ctrl-C stops cleanly. The count goes to stderr. Text output writes the value bytes as they are
(``null`` for a null value), optionally preceded by headers and key, tab-separated; ``-o json``
writes one JSON object per line (keys and values as UTF-8 text, or ``{"base64": ...}``).

Without ``--group`` the consumer assigns itself every partition (or ``--partition``). With
``--group G`` it joins consumer group G (subscribing to the topic, sharing its partitions with the
group's other members, committing what it printed when it stops); ``--from-beginning`` then only
applies where the group has no committed offset (``auto.offset.reset=earliest``), as in Kafka.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from strom.cli.common import add_bootstrap_flag, bootstrap, partitions_of, request_timeout_ms
from strom.cli.errors import EXIT_INTERRUPTED, CliError, UsageError
from strom.cli.output import bytes_field
from strom.cli.parsing import EARLIEST, LATEST, parse_offset

NULL = b"null"
NO_HEADERS = b"NO_HEADERS"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "consume", help="print records of a topic",
        description="Print records of a topic, one per line (like kafka-console-consumer.sh). "
        "Example: strom consume demo --from-beginning --max-messages 5",
    )
    p.add_argument("topic", metavar="TOPIC")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (default: only new records)")
    start.add_argument("--offset", default=None, metavar="N",
                       help="start at offset N (or earliest/latest); needs --partition")
    p.add_argument("--partition", type=int, default=None, metavar="P",
                   help="read only partition P (default: all partitions)")
    p.add_argument("--group", default=None, metavar="G",
                   help="consume as a member of consumer group G (committed offsets, shared "
                   "partitions); cannot be combined with --partition or --offset")
    p.add_argument("--max-messages", type=int, default=None, metavar="N",
                   help="exit after N records (default: no limit)")
    p.add_argument("--timeout-ms", type=int, default=None, metavar="T",
                   help="exit when no record arrives for T ms (default: wait forever)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text",
                   help="text: the value (default); json: one object per line with topic, "
                   "partition, offset, timestamp, key, value, headers")
    p.add_argument("--print-key", action="store_true", help="text: print KEY<TAB>VALUE")
    p.add_argument("--print-headers", action="store_true",
                   help="text: print h1:v1,h2:v2<TAB> before the key/value")
    add_bootstrap_flag(p)
    p.set_defaults(func=cmd_consume)


# --- pure helpers -----------------------------------------------------------------------------


def start_position(
    from_beginning: bool, offset: str | None, partition: int | None
) -> int | str:
    """Where to start: ``earliest``, ``latest`` or an offset (only with one partition)."""
    if offset is not None:
        if partition is None:
            raise UsageError("--offset needs --partition P: an offset belongs to one partition")
        return parse_offset(offset)
    return EARLIEST if from_beginning else LATEST


def format_text(record: Any, print_key: bool = False, print_headers: bool = False) -> bytes:
    """One output line (without newline) in the console consumer's text format."""
    parts: list[bytes] = []
    if print_headers:
        headers = list(record.headers or ())
        parts.append(
            b",".join(k.encode() + b":" + (NULL if v is None else v) for k, v in headers)
            if headers else NO_HEADERS
        )
    if print_key:
        parts.append(NULL if record.key is None else record.key)
    parts.append(NULL if record.value is None else record.value)
    return b"\t".join(parts)


def record_to_json(record: Any) -> dict[str, Any]:
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": bytes_field(record.key),
        "value": bytes_field(record.value),
        "headers": [{"key": k, "value": bytes_field(v)} for k, v in (record.headers or ())],
    }


def format_record(record: Any, output: str, print_key: bool, print_headers: bool) -> bytes:
    if output == "json":
        return json.dumps(record_to_json(record), ensure_ascii=False).encode()
    return format_text(record, print_key, print_headers)


class StopRule:
    """When to stop: after ``max_messages`` records, or ``timeout_ms`` without a record."""

    def __init__(self, max_messages: int | None, timeout_ms: int | None) -> None:
        self.max_messages = max_messages
        self.timeout_s = None if timeout_ms is None else timeout_ms / 1000
        self.count = 0
        self.last_record = time.monotonic()

    def remaining(self) -> int | None:
        return None if self.max_messages is None else self.max_messages - self.count

    def saw(self, n: int, now: float | None = None) -> None:
        if n:
            self.count += n
            self.last_record = time.monotonic() if now is None else now

    def done(self, now: float | None = None) -> bool:
        if self.max_messages is not None and self.count >= self.max_messages:
            return True
        t = time.monotonic() if now is None else now
        return self.timeout_s is not None and t - self.last_record >= self.timeout_s

    def poll_timeout_ms(self, now: float | None = None) -> int:
        """How long the next poll may block: at most 500 ms, never past the idle deadline."""
        if self.timeout_s is None:
            return 500
        t = time.monotonic() if now is None else now
        left = self.timeout_s - (t - self.last_record)
        return max(0, min(500, round(left * 1000)))


# --- command ----------------------------------------------------------------------------------


def cmd_consume(args: argparse.Namespace) -> int:
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError(f"--max-messages {args.max_messages} must be at least 1")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise UsageError(f"--timeout-ms {args.timeout_ms} must be >= 0")
    if args.partition is not None and args.partition < 0:
        raise UsageError(f"--partition {args.partition} must be >= 0")
    if args.group is not None and (args.partition is not None or args.offset is not None):
        raise UsageError("--group cannot be combined with --partition or --offset: a group "
                         "member consumes the partitions the group assigns it, from the "
                         "committed offsets (use 'strom group reset-offsets' to move them)")
    if args.group is not None and not args.group.strip():
        raise UsageError("--group needs a group id, e.g. --group billing")
    start = start_position(args.from_beginning, args.offset, args.partition)
    servers = bootstrap(args)
    timeout_ms = request_timeout_ms(args)
    from strom.client import Consumer, TopicPartition

    if args.group is not None:
        partitions_of(args, args.topic)  # a clear error for an unknown topic
        # a group that cannot be joined (e.g. its coordinator cannot store the group's
        # metadata) ends the command with that error after 3 request timeouts, not never
        consumer = Consumer(servers, request_timeout_ms=timeout_ms, group_id=args.group,
                            auto_offset_reset="earliest" if args.from_beginning else "latest",
                            enable_auto_commit=True, default_api_timeout_ms=3 * timeout_ms)
        return _print_records(consumer, args, lambda: consumer.subscribe([args.topic]))

    partitions = partitions_of(args, args.topic)
    if args.partition is not None:
        if args.partition not in partitions:
            raise CliError(
                f"--partition {args.partition}: topic {args.topic} has partitions "
                f"0..{len(partitions) - 1}"
            )
        partitions = [args.partition]
    tps = [TopicPartition(args.topic, p) for p in partitions]

    consumer = Consumer(servers, request_timeout_ms=timeout_ms)

    def position() -> None:
        consumer.assign(tps)
        _seek(consumer, tps, start)

    return _print_records(consumer, args, position)


def _print_records(consumer: Any, args: argparse.Namespace, position: Callable[[], None]
                   ) -> int:
    """Poll and print until the stop rule says so; close (and so commit, in a group) at the end."""
    rule = StopRule(args.max_messages, args.timeout_ms)
    out = sys.stdout.buffer
    interrupted = False
    try:
        position()
        rule.last_record = time.monotonic()  # the idle clock starts once positioned
        while not rule.done():
            remaining = rule.remaining()
            records: Sequence[Any] = consumer.poll(
                timeout_ms=rule.poll_timeout_ms(),
                max_records=500 if remaining is None else min(500, remaining),
            )
            if remaining is not None:
                records = records[:remaining]
            for record in records:
                out.write(format_record(record, args.output, args.print_key, args.print_headers))
                out.write(b"\n")
                rule.saw(1)  # counted as written, so a closed pipe reports the true count
            if records:
                out.flush()
    except KeyboardInterrupt:
        interrupted = True  # the normal way to stop a consumer without limits: no traceback
    finally:
        consumer.close()
        print(f"Processed a total of {rule.count} messages.", file=sys.stderr)
    return EXIT_INTERRUPTED if interrupted else 0


def _seek(consumer: Any, tps: list[Any], start: int | str) -> None:
    if start == EARLIEST:
        consumer.seek_to_beginning(*tps)
    elif start == LATEST:
        consumer.seek_to_end(*tps)
    else:
        for tp in tps:
            consumer.seek(tp, start)
