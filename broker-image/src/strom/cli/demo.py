"""``strom dev demo``: the platform's main job, end to end, on one command.

1. a local cluster on embedded defaults (the one running in ``--data-dir`` is reused; otherwise
   one is started, and stopped at the end unless ``--keep-running``; ``--bootstrap-server`` uses
   any cluster);
2. topic ``demo`` (3 partitions) created if missing;
3. ``--records`` keyed records produced, with progress and throughput;
4. all of them consumed back and verified: per partition, each record sits at the offset its
   acknowledgement gave, with the key and value sent, in send order, none missing or extra;
5. a real Kafka client (confluent-kafka, when installed) creates topic ``demo-kafka``, produces
   1000 records through the brokers' Kafka listener and reads them back at their offsets
   (skipped with ``--bootstrap-server``, where the Kafka address is not known);
6. a summary table, and how to use the cluster further.

Records of earlier runs stay in the topic; the demo checks the offset range this run wrote
(from each partition's end offset before producing to its end offset after).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.cli import localcluster as lc
from strom.cli.demo_kafka import KAFKA_TOPIC, kafka_client_step
from strom.cli.errors import CliError, UsageError
from strom.cli.invocation import strom_invocation
from strom.cli.output import format_table
from strom.cli.parsing import parse_bootstrap
from strom.protocol.errors import ErrorCode, StromError

TOPIC = "demo"
KAFKA_RECORDS = 1000
SEQ_DIGITS = 10


def register(
    cmds: argparse._SubParsersAction[argparse.ArgumentParser],
    data_dir_flag: Callable[[argparse.ArgumentParser], None],
    base_port_flag: Callable[[argparse.ArgumentParser], None],
) -> None:
    demo = cmds.add_parser(
        "demo", help="run the platform end to end: cluster, topic, produce, consume, verify",
        description="Start a local cluster (or reuse the one running in --data-dir), create "
        "topic 'demo', produce --records keyed records, consume them back, verify count, "
        "content and per-partition order, print a summary, and stop the cluster it started "
        "(unless --keep-running).",
    )
    demo.add_argument("--records", type=int, default=100_000, metavar="N",
                      help="records to produce (default: 100000)")
    demo.add_argument("--record-size", type=int, default=100, metavar="BYTES",
                      help="value size in bytes (default: 100)")
    demo.add_argument("--topic", default=TOPIC, help=f"topic to use (default: {TOPIC})")
    demo.add_argument("--partitions", type=int, default=3, metavar="P",
                      help="partitions when the topic is created (default: 3)")
    demo.add_argument("--keys", type=int, default=1000, metavar="K",
                      help="distinct keys (default: 1000)")
    demo.add_argument("--acks", default="1", choices=["1", "all"],
                      help="producer acks (default: 1)")
    demo.add_argument("--keep-running", action="store_true",
                      help="leave the cluster the demo started running")
    demo.add_argument("--bootstrap-server", metavar="HOST:PORT", default=None,
                      help="use this running cluster instead of a local one")
    demo.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                      help="limit for start-up, and for consuming without progress "
                      "(default: 60)")
    data_dir_flag(demo)
    base_port_flag(demo)
    demo.set_defaults(func=cmd_demo)


# --- pure helpers -----------------------------------------------------------------------------


def make_key(seq: int, keys: int) -> bytes:
    return b"key-%d" % (seq % keys)


def make_value(seq: int, size: int) -> bytes:
    """``0000000042 `` then filler up to ``size`` bytes: the sequence number leads the value."""
    head = b"%0*d " % (SEQ_DIGITS, seq)
    if size <= len(head):
        return head[:size] if size >= SEQ_DIGITS else head
    return head + b"x" * (size - len(head))


def parse_seq(value: bytes | None) -> int:
    if value is None or len(value) < SEQ_DIGITS or not value[:SEQ_DIGITS].isdigit():
        return -1
    return int(value[:SEQ_DIGITS])


@dataclass
class Verifier:
    """Checks consumed records against what was acknowledged, as they arrive.

    ``placed[seq] = (partition, offset)`` from the producer's acknowledgements (offset -1 when
    unknown). A record is good when its value carries a sequence number this run sent, at the
    acknowledged partition and offset, with the key it was sent with, and per partition the
    sequence numbers rise (send order is log order) with no number seen twice.
    """

    placed: Sequence[tuple[int, int]]
    keys: int
    seen: bytearray = field(init=False)
    last_seq: dict[int, int] = field(default_factory=dict)
    count: int = 0

    def __post_init__(self) -> None:
        self.seen = bytearray(len(self.placed))

    def check(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        where = f"partition {partition} offset {offset}"
        seq = parse_seq(value)
        if not 0 <= seq < len(self.placed):
            raise CliError(f"verification failed: {where} holds a record this run did not send")
        if self.seen[seq]:
            raise CliError(f"verification failed: record #{seq} read twice (again at {where})")
        want_partition, want_offset = self.placed[seq]
        if partition != want_partition or (want_offset >= 0 and offset != want_offset):
            raise CliError(
                f"verification failed: record #{seq} was acknowledged at partition "
                f"{want_partition} offset {want_offset} but read at {where}"
            )
        if key != make_key(seq, self.keys):
            raise CliError(f"verification failed: record #{seq} at {where} has the wrong key")
        if seq <= self.last_seq.get(partition, -1):
            raise CliError(
                f"verification failed: {where}: record #{seq} after #{self.last_seq[partition]}"
                " (out of send order)"
            )
        self.last_seq[partition] = seq
        self.seen[seq] = 1
        self.count += 1

    def missing(self) -> int:
        return len(self.placed) - self.count


@dataclass
class Phase:
    records: int
    nbytes: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def summary_table(
    produce: Phase, consume: Phase, per_partition: dict[int, tuple[int, int, int]]
) -> str:
    """Throughput rows, then ``partition: (start offset, end offset, records this run)``."""
    phases = format_table(
        ("PHASE", "RECORDS", "MB", "SECONDS", "RECORDS/S", "MB/S"),
        [
            [name, p.records, round(p.nbytes / 1e6, 2), round(p.seconds, 2), int(p.rate),
             round(p.mb_per_s, 2)]
            for name, p in (("produce", produce), ("consume", consume))
        ],
    )
    parts = format_table(
        ("PARTITION", "START-OFFSET", "END-OFFSET", "RECORDS"),
        [[p, *per_partition[p]] for p in sorted(per_partition)],
    )
    return phases + "\n\n" + parts


class Progress:
    """Progress lines on stderr, at most every ``every`` seconds (one line, rewritten, on a TTY)."""

    def __init__(self, label: str, total: int, every: float = 0.5) -> None:
        self.label = label
        self.total = total
        self.every = every
        self.start = time.monotonic()
        self.last = self.start
        self.shown = -1
        self.tty = sys.stderr.isatty()

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if (not force and now - self.last < self.every) or (force and done == self.shown):
            if force and self.tty:
                print(file=sys.stderr, flush=True)
            return
        self.last = now
        self.shown = done
        elapsed = now - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        pct = 100 * done / self.total if self.total else 100.0
        line = f"strom: {self.label} {done}/{self.total} ({pct:.0f}%, {rate:,.0f} records/s)"
        if self.tty:
            end = "\n" if force else ""
            print("\r" + line, end=end, file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)


# --- the run ----------------------------------------------------------------------------------


def note(message: str) -> None:
    print(f"strom: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def demo_cluster(args: argparse.Namespace) -> Iterator[tuple[str, str, str]]:
    """Yield (bootstrap, how it was found, Kafka-listener bootstrap or ""); stop what was
    started unless --keep-running."""
    if args.bootstrap_server is not None:
        yield parse_bootstrap(args.bootstrap_server), "given", ""
        return
    data_dir: Path = args.data_dir
    with lc.locked(data_dir):
        state = lc.running_state(data_dir)
        if state is not None:
            note(f"using the dev cluster already running in {data_dir} ({state.bootstrap})")
            started = False
        else:
            state = lc.plan_cluster(data_dir, 1, base_port=args.base_port)
            note(f"starting a local cluster in {data_dir}")
            took = lc.start_cluster(state, args.timeout, note)
            note(f"cluster ready in {took:.1f} s")
            started = True
    try:
        yield state.bootstrap, "started" if started else "reused", state.kafka_bootstrap
    finally:
        if started and not args.keep_running:
            with lc.locked(data_dir):
                lc.stop_cluster(state, 15.0)
                lc.state_path(data_dir).unlink(missing_ok=True)
            note("stopped the cluster the demo started")


#: How long a new topic may take to reach every broker's metadata (the controller commits it
#: first; each broker applies it a moment later).
TOPIC_VISIBLE_TIMEOUT_S = 15.0


def ensure_topic(admin: Any, topic: str, partitions: int) -> list[int]:
    """Create ``topic`` (the cluster's default replication factor) and wait until it is seen."""
    try:
        admin.create_topic(topic, partitions=partitions, replication_factor=-1, configs={})
        note(f"created topic {topic} with {partitions} partitions")
    except StromError as err:
        if err.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
        note(f"topic {topic} exists; appending to it")
    deadline = time.monotonic() + TOPIC_VISIBLE_TIMEOUT_S
    while True:
        try:
            (desc,) = admin.describe_topics([topic])
        except StromError as err:
            if err.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        if all(p.leader >= 0 for p in desc.partitions) or time.monotonic() > deadline:
            return sorted(p.partition for p in desc.partitions)
        time.sleep(0.1)


def produce_phase(
    bootstrap: str, topic: str, n: int, size: int, keys: int, acks: str
) -> tuple[Phase, list[tuple[int, int]]]:
    from strom.client import Producer

    producer = Producer(bootstrap, acks=acks if acks == "all" else 1, linger_ms=5,
                        batch_size=256 * 1024)
    futures = []
    nbytes = 0
    progress = Progress("produced", n)
    start = time.monotonic()
    try:
        for seq in range(n):
            key = make_key(seq, keys)
            value = make_value(seq, size)
            nbytes += len(key) + len(value)
            futures.append(producer.send(topic, value=value, key=key))
            if seq & 0x3FF == 0:
                progress.update(seq)
        producer.flush()
        elapsed = time.monotonic() - start
    finally:
        producer.close()
    progress.update(n, force=True)
    placed = []
    failed = 0
    first: BaseException | None = None
    for fut in futures:
        err = fut.exception()
        if err is not None:
            failed += 1
            first = first or err
            placed.append((-1, -1))
        else:
            meta = fut.result()
            placed.append((meta.partition, meta.offset))
    if failed:
        raise CliError(f"{failed} of {n} records were not acknowledged; first error: {first}")
    return Phase(n, nbytes, elapsed), placed


def consume_phase(
    bootstrap: str, topic: str, starts: dict[int, int], ends: dict[int, int],
    verifier: Verifier, timeout: float,
) -> Phase:
    from strom.client import Consumer, TopicPartition

    total = sum(ends[p] - starts[p] for p in starts)
    consumer = Consumer(bootstrap)
    progress = Progress("consumed", total)
    nbytes = 0
    count = 0
    start = time.monotonic()
    last_progress = start
    try:
        tps = [TopicPartition(topic, p) for p in sorted(starts)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, starts[tp.partition])
        while count < total:
            records = consumer.poll(timeout_ms=500, max_records=10_000)
            now = time.monotonic()
            if records:
                last_progress = now
            elif now - last_progress > timeout:
                raise CliError(
                    f"verification failed: consumed {count} of {total} records, then nothing "
                    f"for {timeout:.0f} s"
                )
            for r in records:
                if r.offset >= ends[r.partition]:
                    continue  # written by someone else after this run's records
                verifier.check(r.partition, r.offset, r.key, r.value)
                nbytes += (0 if r.key is None else len(r.key)) + (
                    0 if r.value is None else len(r.value))
                count += 1
            progress.update(count)
        elapsed = time.monotonic() - start
    finally:
        consumer.close()
    progress.update(count, force=True)
    if verifier.missing():
        raise CliError(f"verification failed: {verifier.missing()} records never read back")
    return Phase(count, nbytes, elapsed)


def cmd_demo(args: argparse.Namespace) -> int:
    if args.records < 1:
        raise UsageError(f"--records {args.records} must be at least 1")
    if args.record_size < SEQ_DIGITS + 1:
        raise UsageError(f"--record-size {args.record_size} must be at least {SEQ_DIGITS + 1}")
    if args.partitions < 1:
        raise UsageError(f"--partitions {args.partitions} must be at least 1")
    if args.keys < 1:
        raise UsageError(f"--keys {args.keys} must be at least 1")
    from strom.client import Admin, TopicPartition

    with demo_cluster(args) as (bootstrap, how, kafka_bootstrap):
        admin = Admin(bootstrap)
        try:
            partitions = ensure_topic(admin, args.topic, args.partitions)
            tps = {TopicPartition(args.topic, p): "latest" for p in partitions}
            before = {tp.partition: _offset(v) for tp, v in admin.list_offsets(tps).items()}
            note(f"producing {args.records} records of {args.record_size} bytes to "
                 f"{args.topic}")
            produced, placed = produce_phase(bootstrap, args.topic, args.records,
                                             args.record_size, args.keys, args.acks)
            after = {tp.partition: _offset(v) for tp, v in admin.list_offsets(tps).items()}
        finally:
            admin.close()
        note(f"consuming them back from offsets {_offsets_text(before)} (this run's start)")
        verifier = Verifier(placed, args.keys)
        consumed = consume_phase(bootstrap, args.topic, before, after, verifier, args.timeout)
        per_partition = {p: (before[p], after[p], after[p] - before[p]) for p in partitions}
        kafka = None
        if kafka_bootstrap:
            note(f"a Kafka client (confluent-kafka) at {kafka_bootstrap}: produce and consume "
                 f"{KAFKA_RECORDS} records on {KAFKA_TOPIC}")
            kafka = kafka_client_step(kafka_bootstrap, KAFKA_RECORDS, note, args.timeout)
        print(f"Demo OK: {args.records} records produced to {args.topic!r} and read back "
              "in order, every one at its acknowledged offset.")
        if kafka is not None:
            print(f"Kafka client OK: confluent-kafka produced {kafka.records} records to "
                  f"{KAFKA_TOPIC!r} (idempotent, acks=all) and read them back at their "
                  f"offsets through the Kafka listener ({kafka.seconds:.1f} s).")
        print()
        print(summary_table(produced, consumed, per_partition))
        print()
        keep = how != "started" or args.keep_running
        strom = strom_invocation()
        if keep:
            print(f"The cluster is running at {bootstrap}. Try:")
            print(f"  export STROM_BOOTSTRAP_SERVERS={bootstrap}")
            if kafka_bootstrap:
                print(f"  kcat -b {kafka_bootstrap} -t {KAFKA_TOPIC} -C -e   # Kafka clients")
            print(f"  {strom} consume {args.topic} --from-beginning --max-messages 5")
            print(f"  {strom} topic describe {args.topic}")
            print(f"  echo 'hello:world' | {strom} produce {args.topic} --key-separator :")
            if how == "started":
                print(f"Stop it with: {strom} dev down --data-dir {args.data_dir}")
        else:
            print("The demo stopped the cluster it started. To keep one running:")
            print(f"  {strom} dev up          # then, in any shell:")
            print(f"  {strom} consume {args.topic} --from-beginning --max-messages 5")
            print(f"  {strom} dev down")
            print(f"(or: {strom} dev demo --keep-running)")
    return 0


def _offsets_text(offsets: dict[int, int]) -> str:
    return ", ".join(f"{p}:{o}" for p, o in sorted(offsets.items()))


def _offset(value: int) -> int:
    return int(value)
