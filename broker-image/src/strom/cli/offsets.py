"""``strom offsets``: per-partition offsets of a topic at a point in time (like GetOffsetShell).

``--time earliest`` is the log start offset, ``latest`` (default) the log end offset, and a
timestamp (ms since the epoch or ISO-8601) the first offset whose record timestamp is at or after
it (-1 when there is none, as in Kafka).
"""

from __future__ import annotations

import argparse
from typing import Any

from strom.cli.common import add_bootstrap_flag, open_admin
from strom.cli.errors import CliError
from strom.cli.output import add_output_flag, format_table, render
from strom.cli.parsing import parse_time


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "offsets", help="show per-partition offsets of a topic",
        description="Show the offsets of each partition of a topic at a point in time.",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--time", default="latest", metavar="WHEN",
                   help="earliest, latest (default), ms since the epoch, or ISO-8601 "
                   "(e.g. 2024-05-01T12:00:00Z; no zone = UTC)")
    p.add_argument("--partition", type=int, action="append", metavar="P",
                   help="only these partitions (repeatable; default: all)")
    add_output_flag(p)
    add_bootstrap_flag(p)
    p.set_defaults(func=cmd_offsets)


def offset_rows(topic: str, results: dict[int, int]) -> list[dict[str, Any]]:
    """Plain rows, by partition, from ``{partition: offset}``."""
    return [{"topic": topic, "partition": p, "offset": results[p]} for p in sorted(results)]


def offsets_table(rows: list[dict[str, Any]]) -> str:
    return format_table(
        ("TOPIC", "PARTITION", "OFFSET"), [[r["topic"], r["partition"], r["offset"]] for r in rows]
    )


def cmd_offsets(args: argparse.Namespace) -> int:
    spec = parse_time(args.time)
    from strom.client import TopicPartition

    with open_admin(args) as admin:
        (desc,) = admin.describe_topics([args.topic])
        partitions = sorted(p.partition for p in desc.partitions)
        if args.partition:
            missing = sorted(set(args.partition) - set(partitions))
            if missing:
                raise CliError(
                    f"--partition {missing[0]}: topic {args.topic} has partitions "
                    f"0..{len(partitions) - 1}"
                )
            partitions = sorted(set(args.partition))
        tps = {TopicPartition(args.topic, p): spec for p in partitions}
        result = admin.list_offsets(tps)
    rows = offset_rows(args.topic, {tp.partition: v for tp, v in result.items()})
    print(render(rows, args.output, offsets_table(rows)))
    return 0
