"""``strom produce``: the console producer. One record per stdin line, like kafka-console-producer.

Lines are bytes (no decoding), the trailing newline removed. With ``--key-separator SEP`` the part
before the first SEP is the key (a line without SEP is an error, as with ``parse.key=true``).
The count is reported on stderr at the end, so stdout stays clean for pipes. Sends are
asynchronous (batched by ``--linger-ms``/``--batch-size``); failures are counted and the first one
is reported after ``flush()``. As kafka-console-producer, a batch is retried
``--message-send-max-retries`` times (3) after a retriable error, then that error is reported:
``--acks all`` to a partition below ``min.insync.replicas`` fails in well under a second with
NOT_ENOUGH_REPLICAS instead of retrying until the delivery timeout.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterable
from typing import BinaryIO

from strom.cli.common import add_bootstrap_flag, bootstrap, partitions_of, request_timeout_ms
from strom.cli.errors import CliError, UsageError
from strom.cli.parsing import parse_acks, parse_kv_list, split_key, strip_newline

COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "produce", help="send lines from stdin as records",
        description="Read lines from stdin and send each as one record (like "
        "kafka-console-producer.sh). Example: printf 'k1:hello\\n' | strom produce demo "
        "--key-separator :",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--key-separator", metavar="SEP", default=None,
                   help="split each line at the first SEP into key and value "
                   "(default: no key)")
    p.add_argument("--acks", default="1", metavar="0|1|all",
                   help="acknowledgements to wait for (default: 1)")
    p.add_argument("--partition", type=int, default=None, metavar="P",
                   help="send every record to partition P (default: by key hash, "
                   "or sticky for null keys)")
    p.add_argument("--compression", choices=COMPRESSION, default="none",
                   help="batch compression codec (default: none)")
    p.add_argument("--header", action="append", metavar="KEY=VALUE",
                   help="add a header to every record (repeatable)")
    p.add_argument("--linger-ms", type=int, default=5, metavar="MS",
                   help="how long to wait to fill a batch (default: 5)")
    p.add_argument("--batch-size", type=int, default=65536, metavar="BYTES",
                   help="batch size limit per partition (default: 65536)")
    p.add_argument("--message-send-max-retries", type=int, default=3, metavar="N",
                   help="retries of a batch after a retriable error such as NOT_ENOUGH_REPLICAS "
                   "or NOT_LEADER_OR_FOLLOWER, then the error is reported (default: 3, as "
                   "kafka-console-producer; raise it to ride out a leader election)")
    p.add_argument("--retry-backoff-ms", type=int, default=100, metavar="MS",
                   help="first wait before a retry, doubled each time (default: 100)")
    add_bootstrap_flag(p)
    p.set_defaults(func=cmd_produce)


class DeliveryTally:
    """Counts acknowledged and failed sends from the producer's callbacks (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acked = 0
        self.failed = 0
        self.first_error: BaseException | None = None

    def on_delivery(self, metadata: object, error: BaseException | None) -> None:
        with self._lock:
            if error is None:
                self.acked += 1
            else:
                self.failed += 1
                if self.first_error is None:
                    self.first_error = error


def read_records(
    stream: BinaryIO | Iterable[bytes], separator: bytes | None
) -> Iterable[tuple[int, bytes | None, bytes]]:
    """(line number, key, value) for each input line."""
    for lineno, raw in enumerate(stream, start=1):
        line = strip_newline(raw)
        try:
            key, value = split_key(line, separator)
        except ValueError:
            sep = (separator or b"").decode(errors="replace")
            raise CliError(
                f"stdin line {lineno} has no key separator {sep!r}; with --key-separator "
                f"every line must be KEY{sep}VALUE"
            ) from None
        yield lineno, key, value


def cmd_produce(args: argparse.Namespace) -> int:
    acks = parse_acks(args.acks)
    headers = list(parse_kv_list(args.header, "--header").items())
    header_bytes = [(k, v.encode()) for k, v in headers] or None
    if args.key_separator is not None and args.key_separator == "":
        raise UsageError("--key-separator is empty; give e.g. --key-separator :")
    if args.partition is not None and args.partition < 0:
        raise UsageError(f"--partition {args.partition} must be >= 0")
    separator = args.key_separator.encode() if args.key_separator is not None else None
    if args.message_send_max_retries < 0:
        raise UsageError(f"--message-send-max-retries {args.message_send_max_retries} must be "
                         ">= 0")
    if args.retry_backoff_ms < 0:
        raise UsageError(f"--retry-backoff-ms {args.retry_backoff_ms} must be >= 0")

    servers = bootstrap(args)
    timeout_ms = request_timeout_ms(args)
    # Fail fast on an unknown topic or partition (the producer would wait for metadata).
    partitions = partitions_of(args, args.topic)
    if args.partition is not None and args.partition not in partitions:
        raise CliError(
            f"--partition {args.partition}: topic {args.topic} has partitions "
            f"0..{len(partitions) - 1}"
        )
    from strom.client import Producer

    producer = Producer(
        servers, acks=acks, linger_ms=args.linger_ms, batch_size=args.batch_size,
        compression_type=args.compression, request_timeout_ms=timeout_ms,
        max_block_ms=timeout_ms, delivery_timeout_ms=3 * timeout_ms + args.linger_ms,
        # Kafka's console producer: a few retries, then the broker's own error (e.g.
        # NOT_ENOUGH_REPLICAS at once, not a delivery timeout 30 s later)
        retries=args.message_send_max_retries, retry_backoff_ms=args.retry_backoff_ms,
    )
    tally = DeliveryTally()
    sent = 0

    try:
        for _, key, value in read_records(sys.stdin.buffer, separator):
            producer.send(
                args.topic, value=value, key=key, partition=args.partition,
                headers=header_bytes, on_delivery=tally.on_delivery,
            )
            sent += 1
        producer.flush()
    finally:
        producer.close()
    if tally.failed:
        err = tally.first_error
        detail = getattr(err, "message", None) or str(err)
        name = getattr(getattr(err, "code", None), "name", type(err).__name__)
        raise CliError(
            f"{tally.failed} of {sent} records to {args.topic} failed, first: {name}: {detail}"
        )
    print(f"Produced {sent} records to {args.topic}.", file=sys.stderr)
    return 0
