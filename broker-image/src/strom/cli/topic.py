"""``strom topic``: create, list, describe, delete, alter configs, add partitions.

Mirrors ``kafka-topics.sh`` / ``kafka-configs.sh``: the same flag names (``--partitions``,
``--replication-factor``, ``--config k=v``, ``--if-not-exists``), one message per change on stdout,
``-o table|json|yaml`` on list and describe. Replica reassignment is not here yet (it needs the
controller quorum).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from strom.cli.common import add_bootstrap_flag, open_admin
from strom.cli.config_docs import topic_epilog
from strom.cli.errors import UsageError
from strom.cli.output import add_output_flag, format_table, render
from strom.cli.parsing import parse_kv_list
from strom.protocol.errors import ErrorCode, StromError

PARTITION_COLUMNS = (
    "TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR",
    "START", "END", "HW", "SIZE",
)


#: CreateTopics' "use the broker's default" for partitions and replication factor.
BROKER_DEFAULT = -1

def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topic = sub.add_parser(
        "topic", help="create, list, describe, alter and delete topics",
        description="Manage topics (like kafka-topics.sh).",
    )
    cmds = topic.add_subparsers(dest="topic_command", metavar="COMMAND", required=True)

    create = cmds.add_parser("create", help="create a topic", description="Create a topic.",
                             epilog=topic_epilog(),
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    create.add_argument("name", metavar="NAME")
    # None = not given: the broker's default (-1 on the wire, as Kafka's CreateTopics); given,
    # it must be >= 1, as kafka-topics checks ("The partitions must be greater than 0")
    create.add_argument("--partitions", type=int, default=None, metavar="P",
                        help="partition count, at least 1 (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=int, default=None, metavar="R",
                        help="replicas per partition, 1..32767 (default: the broker's "
                        "default.replication.factor)")
    create.add_argument("--config", action="append", metavar="KEY=VALUE",
                        help="topic config, e.g. retention.ms=3600000 (repeatable)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed without change if the topic already exists")
    add_bootstrap_flag(create)
    create.set_defaults(func=cmd_create)

    lst = cmds.add_parser("list", help="list topics", description="List topics.")
    lst.add_argument("--include-internal", action="store_true",
                     help="also list internal topics (e.g. __consumer_offsets)")
    add_output_flag(lst)
    add_bootstrap_flag(lst)
    lst.set_defaults(func=cmd_list)

    describe = cmds.add_parser(
        "describe", help="show partitions, leaders, offsets and configs",
        description="Describe topics: partitions, leader, replicas, ISR, offsets, size, configs.",
    )
    describe.add_argument("names", nargs="*", metavar="NAME", help="topics (default: all)")
    describe.add_argument("--include-internal", action="store_true",
                          help="with no NAME, also describe internal topics")
    add_output_flag(describe)
    add_bootstrap_flag(describe)
    describe.set_defaults(func=cmd_describe)

    delete = cmds.add_parser("delete", help="delete topics", description="Delete topics.")
    delete.add_argument("names", nargs="+", metavar="NAME")
    delete.add_argument("--if-exists", action="store_true",
                        help="succeed without change for topics that do not exist")
    add_bootstrap_flag(delete)
    delete.set_defaults(func=cmd_delete)

    alter = cmds.add_parser(
        "alter", help="set or remove topic configs",
        description="Change topic configs incrementally (like kafka-configs.sh --alter).",
        epilog=topic_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    alter.add_argument("name", metavar="NAME")
    alter.add_argument("--config", action="append", metavar="KEY=VALUE",
                       help="set a config (repeatable)")
    alter.add_argument("--delete-config", action="append", metavar="KEY", default=[],
                       help="revert a config to the broker default (repeatable)")
    add_bootstrap_flag(alter)
    alter.set_defaults(func=cmd_alter)

    add = cmds.add_parser(
        "add-partitions", help="grow a topic's partition count",
        description="Increase the partition count of a topic (partitions can only grow).",
    )
    add.add_argument("name", metavar="NAME")
    add.add_argument("--partitions", type=int, required=True, metavar="TOTAL",
                     help="the new total partition count")
    add_bootstrap_flag(add)
    add.set_defaults(func=cmd_add_partitions)


# --- pure helpers -----------------------------------------------------------------------------


def _known(value: int) -> int | None:
    return value if value >= 0 else None


def _cell(value: int | None) -> object:
    return "-" if value is None else value


def topic_to_dict(desc: Any) -> dict[str, Any]:
    """A TopicDescription as plain data for JSON/YAML."""
    return {
        "name": desc.name,
        "topic_id": desc.topic_id,
        "internal": bool(getattr(desc, "internal", False)),
        "partitions": [
            {
                "partition": p.partition,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                # from the partition's leader; None when it did not answer (down, unreachable)
                "log_start_offset": _known(p.log_start_offset),
                "log_end_offset": _known(p.log_end_offset),
                "high_watermark": _known(p.high_watermark),
                "size_bytes": _known(p.size_bytes),
            }
            for p in sorted(desc.partitions, key=lambda p: p.partition)
        ],
        "configs": dict(sorted(desc.configs.items())),
    }


def describe_table(topics: Sequence[dict[str, Any]]) -> str:
    """One header line per topic (id, partition count, configs), then a table of partitions."""
    if not topics:
        return "No topics."
    blocks = []
    for t in topics:
        configs = ",".join(f"{k}={v}" for k, v in t["configs"].items()) or "-"
        head = (
            f"Topic: {t['name']}  TopicId: {t['topic_id'] or '-'}  "
            f"PartitionCount: {len(t['partitions'])}  "
            f"ReplicationFactor: {len(t['partitions'][0]['replicas']) if t['partitions'] else 0}"
            f"  Configs: {configs}"
        )
        rows = [
            [
                t["name"], p["partition"], p["leader"], p["leader_epoch"], p["replicas"],
                p["isr"], _cell(p["log_start_offset"]), _cell(p["log_end_offset"]),
                _cell(p["high_watermark"]), _cell(p["size_bytes"]),
            ]
            for p in t["partitions"]
        ]
        blocks.append(head + "\n" + format_table(PARTITION_COLUMNS, rows))
    return "\n\n".join(blocks)


def list_rows(topics: Sequence[dict[str, Any]]) -> list[list[Any]]:
    return [[t["name"], len(t["partitions"]), _rf(t)] for t in topics]


def _rf(t: dict[str, Any]) -> int:
    return len(t["partitions"][0]["replicas"]) if t["partitions"] else 0


# --- commands ---------------------------------------------------------------------------------


def cmd_create(args: argparse.Namespace) -> int:
    configs = parse_kv_list(args.config, "--config")
    if args.partitions is not None and args.partitions < 1:
        raise UsageError(f"--partitions {args.partitions} must be at least 1 (leave it out for "
                         "the broker's num.partitions)")
    if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise UsageError(f"--replication-factor {args.replication_factor} must be between 1 "
                         "and 32767 (leave it out for the broker's default.replication.factor)")
    with open_admin(args) as admin:
        try:
            admin.create_topic(
                args.name,
                partitions=BROKER_DEFAULT if args.partitions is None else args.partitions,
                replication_factor=(BROKER_DEFAULT if args.replication_factor is None
                                    else args.replication_factor),
                configs=configs,
            )
        except StromError as err:
            if args.if_not_exists and err.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                print(f"Topic {args.name} already exists.")
                return 0
            raise
    print(f"Created topic {args.name}.")
    return 0


def _describe(args: argparse.Namespace, names: list[str]) -> list[dict[str, Any]]:
    with open_admin(args) as admin:
        include_internal = bool(getattr(args, "include_internal", False))
        descs = admin.describe_topics(names or None, include_internal=include_internal)
    topics = [topic_to_dict(d) for d in descs]
    if not include_internal and not names:
        topics = [t for t in topics if not t["internal"]]
    return sorted(topics, key=lambda t: t["name"])


def cmd_list(args: argparse.Namespace) -> int:
    topics = _describe(args, [])
    data = [{"name": t["name"], "partitions": len(t["partitions"]),
             "replication_factor": _rf(t), "internal": t["internal"]} for t in topics]
    table = (
        format_table(("NAME", "PARTITIONS", "REPLICATION-FACTOR"), list_rows(topics))
        if topics else "No topics."
    )
    print(render(data, args.output, table))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    topics = _describe(args, list(args.names))
    print(render(topics, args.output, describe_table(topics)))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        for name in args.names:
            try:
                admin.delete_topics([name])
            except StromError as err:
                if args.if_exists and err.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    print(f"Topic {name} does not exist.")
                    continue
                raise
            print(f"Deleted topic {name}.")
    return 0


def cmd_alter(args: argparse.Namespace) -> int:
    to_set = parse_kv_list(args.config, "--config")
    to_delete = list(args.delete_config)
    if not to_set and not to_delete:
        raise UsageError("topic alter needs --config KEY=VALUE or --delete-config KEY")
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise UsageError(f"{both[0]} is given to both --config and --delete-config; pick one")
    with open_admin(args) as admin:
        admin.alter_configs(args.name, set=to_set, delete=to_delete)
    changes = [f"{k}={v}" for k, v in to_set.items()] + [f"-{k}" for k in to_delete]
    print(f"Altered topic {args.name}: {', '.join(changes)}.")
    return 0


def cmd_add_partitions(args: argparse.Namespace) -> int:
    if args.partitions < 1:
        raise UsageError(f"--partitions {args.partitions} must be at least 1")
    with open_admin(args) as admin:
        admin.create_partitions(args.name, args.partitions)
    print(f"Topic {args.name} now has {args.partitions} partitions.")
    return 0
