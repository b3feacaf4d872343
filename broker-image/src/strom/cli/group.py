"""``strom group``: list, describe, reset offsets of and delete consumer groups.

Mirrors ``kafka-consumer-groups.sh``: the same columns (CURRENT-OFFSET, LOG-END-OFFSET, LAG,
CONSUMER-ID, HOST, CLIENT-ID), the same reset scenarios (``--to-earliest``, ``--to-latest``,
``--to-offset``, ``--to-datetime``, ``--by-duration``, ``--shift-by``) and the same safety
default: a reset is a dry run that prints the plan unless ``--execute`` is given, and only a
group without members can be reset or deleted.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from strom.cli.common import add_bootstrap_flag, open_admin
from strom.cli.errors import CliError, UsageError
from strom.cli.output import add_output_flag, format_table, render
from strom.cli.parsing import parse_time

OFFSET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID")
MEMBER_COLUMNS = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                  "#PARTITIONS", "ASSIGNMENT")
STATE_COLUMNS = ("GROUP", "COORDINATOR", "ASSIGNMENT-STRATEGY", "STATE", "GENERATION",
                 "#MEMBERS")
RESET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "group", help="list, describe, reset and delete consumer groups",
        description="Manage consumer groups (like kafka-consumer-groups.sh).",
    )
    cmds = group.add_subparsers(dest="group_command", metavar="COMMAND", required=True)

    lst = cmds.add_parser("list", help="list consumer groups",
                          description="List the consumer groups of the cluster (every broker "
                          "is asked for the groups it coordinates).")
    lst.add_argument("--state", action="append", metavar="STATE", default=[],
                     help="only groups in this state: Empty, Stable, PreparingRebalance, "
                     "CompletingRebalance, Dead (repeatable)")
    add_output_flag(lst)
    add_bootstrap_flag(lst)
    lst.set_defaults(func=cmd_list)

    describe = cmds.add_parser(
        "describe", help="show a group's offsets and lag, members or state",
        description="Describe consumer groups. Default (--offsets): per partition the committed "
        "offset, log end offset, lag and owning member. A partition without a committed offset "
        "shows CURRENT-OFFSET '-' and a lag counted from the log start offset.")
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", dest="view", action="store_const", const="offsets",
                      help="per-partition offsets and lag (default)")
    view.add_argument("--members", dest="view", action="store_const", const="members",
                      help="the members and their assignments")
    view.add_argument("--state", dest="view", action="store_const", const="state",
                      help="state, generation, coordinator and assignment strategy")
    describe.set_defaults(view="offsets")
    add_output_flag(describe)
    add_bootstrap_flag(describe)
    describe.set_defaults(func=cmd_describe)

    reset = cmds.add_parser(
        "reset-offsets", help="move a group's committed offsets (dry run unless --execute)",
        description="Reset the committed offsets of a group without members. Prints the plan; "
        "nothing changes without --execute. Offsets are clamped to [log start, log end].")
    reset.add_argument("group", metavar="GROUP")
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", metavar="TOPIC[:P,..]", default=None,
                       help="a topic, or some of its partitions as orders:0,2 (repeatable)")
    which.add_argument("--all-topics", action="store_true",
                       help="every partition the group has committed offsets for")
    scenario = reset.add_mutually_exclusive_group(required=True)
    scenario.add_argument("--to-earliest", action="store_true", help="the log start offset")
    scenario.add_argument("--to-latest", action="store_true", help="the log end offset")
    scenario.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    scenario.add_argument("--to-datetime", metavar="WHEN",
                          help="the first offset at or after WHEN (ISO-8601, no zone = UTC, or "
                          "ms since the epoch); the log end if there is none")
    scenario.add_argument("--by-duration", metavar="PnDTnHnMnS",
                          help="the first offset at or after now minus this ISO-8601 duration, "
                          "e.g. PT30M or P1DT12H (Kafka's --by-duration)")
    scenario.add_argument("--shift-by", type=int, metavar="N",
                          help="the committed offset plus N (N may be negative)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true",
                      help="only show the plan (the default)")
    add_output_flag(reset)
    add_bootstrap_flag(reset)
    reset.set_defaults(func=cmd_reset)

    delete = cmds.add_parser(
        "delete", help="delete groups and their committed offsets",
        description="Delete consumer groups without members, with their committed offsets.")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    add_bootstrap_flag(delete)
    delete.set_defaults(func=cmd_delete)


# --- pure helpers -----------------------------------------------------------------------------


def parse_topic_arg(value: str) -> str | tuple[str, int] | list[tuple[str, int]]:
    """``orders`` -> "orders"; ``orders:0,2`` -> [("orders", 0), ("orders", 2)]."""
    name, sep, parts = value.partition(":")
    name = name.strip()
    if not name:
        raise UsageError(f"--topic {value!r} has no topic name; give TOPIC or TOPIC:P,..")
    if not sep:
        return name
    items = [p.strip() for p in parts.split(",") if p.strip()]
    if not items or not all(p.isdigit() for p in items):
        raise UsageError(f"--topic {value!r}: partitions must be numbers, e.g. {name}:0,1")
    return [(name, int(p)) for p in dict.fromkeys(items)]


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def parse_duration_ms(value: str, flag: str = "--by-duration") -> int:
    """ISO-8601 ``PnDTnHnMnS`` (Kafka's --by-duration format) -> milliseconds (> 0)."""
    text = value.strip().upper()
    match = _DURATION.fullmatch(text)
    if match is None or not any(match.groups()) or text.endswith("T"):
        raise UsageError(f"{flag} {value!r} is not an ISO-8601 duration; give e.g. PT30M, "
                         "PT1H or P1DT12H")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    ms = int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
    if ms <= 0:
        raise UsageError(f"{flag} {value!r} is zero; give a positive duration")
    return ms


def reset_spec(args: argparse.Namespace, now_ms: int | None = None) -> str:
    """The scenario flags as ``OffsetReset.parse`` text."""
    if args.to_earliest:
        return "earliest"
    if args.to_latest:
        return "latest"
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise UsageError(f"--to-offset {args.to_offset} must be >= 0")
        return f"offset:{args.to_offset}"
    if args.to_datetime is not None:
        when = parse_time(args.to_datetime, "--to-datetime")
        if isinstance(when, str):
            raise UsageError(f"--to-datetime {args.to_datetime!r}: give a date-time; for "
                             f"{when} use --to-{when}")
        return f"datetime:{when}"
    if args.by_duration is not None:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return f"datetime:{max(0, now - parse_duration_ms(args.by_duration))}"
    return f"shift:{args.shift_by}"


def lag_rows(group: str, lags: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"group": group, "topic": r.topic, "partition": r.partition,
             "current_offset": r.committed,
             "log_end_offset": r.log_end_offset if r.log_end_offset >= 0 else None,
             "lag": r.lag, "consumer_id": r.member_id, "host": r.host,
             "client_id": r.client_id} for r in lags]


def member_rows(desc: Any) -> list[dict[str, Any]]:
    return [{"group": desc.group_id, "consumer_id": m.member_id,
             "group_instance_id": m.group_instance_id, "host": m.host,
             "client_id": m.client_id, "partitions": len(m.assignment),
             "assignment": [str(tp) for tp in m.assignment]} for m in desc.members]


def state_row(desc: Any) -> dict[str, Any]:
    return {"group": desc.group_id, "coordinator": desc.coordinator,
            "assignment_strategy": desc.protocol or None, "state": desc.state,
            "generation": desc.generation, "members": len(desc.members)}


def table(columns: Sequence[str], rows: list[dict[str, Any]]) -> str:
    return format_table(columns, [list(r.values()) for r in rows])


def _note(text: str, args: argparse.Namespace) -> None:
    """Kafka's remarks ("has no active members") go to stderr so stdout stays the table."""
    if args.output == "table":
        print(text, file=sys.stderr)


# --- commands ---------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        groups = admin.list_groups(args.state or None)
    rows = [{"group": g.group_id, "state": g.state, "coordinator": g.coordinator}
            for g in groups]
    print(render(rows, args.output, table(("GROUP", "STATE", "COORDINATOR"), rows)))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    groups = list(dict.fromkeys(args.groups))
    out: list[dict[str, Any]] = []
    text: list[str] = []
    with open_admin(args) as admin:
        descriptions = admin.describe_groups(groups)
        missing = [d.group_id for d in descriptions if d.state == "Dead" and not d.members]
        if missing:
            raise CliError(f"consumer group {missing[0]!r} does not exist (see: strom group "
                           "list)")
        for desc in descriptions:
            if desc.state in ("PreparingRebalance", "CompletingRebalance"):
                _note(f"Warning: consumer group '{desc.group_id}' is rebalancing.", args)
            if args.view == "state":
                rows = [state_row(desc)]
                columns: Sequence[str] = STATE_COLUMNS
            elif args.view == "members":
                rows = member_rows(desc)
                columns = MEMBER_COLUMNS
                if not rows:
                    _note(f"Consumer group '{desc.group_id}' has no active members.", args)
            else:
                rows = lag_rows(desc.group_id, admin.group_lag(desc.group_id))
                columns = OFFSET_COLUMNS
                if not desc.members:
                    _note(f"Consumer group '{desc.group_id}' has no active members.", args)
            out.extend(rows)
            if rows:
                text.append(table(columns, rows))
    print(render(out, args.output, "\n\n".join(text)))
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    spec = reset_spec(args)
    topics: list[str | tuple[str, int]] = []
    for value in args.topic or ():
        parsed = parse_topic_arg(value)
        topics.extend(parsed if isinstance(parsed, list) else [parsed])
    with open_admin(args) as admin:
        if args.all_topics:
            topics = sorted({tp.topic for tp in admin.list_group_offsets(args.group)})
            if not topics:
                raise CliError(f"group {args.group!r} has no committed offsets; name the "
                               "topics with --topic")
        plan = admin.reset_group_offsets(args.group, topics, spec, dry_run=not args.execute)
    rows = [{"group": args.group, "topic": tp.topic, "partition": tp.partition,
             "new_offset": off} for tp, off in sorted(plan.items())]
    print(render(rows, args.output, table(RESET_COLUMNS, rows)))
    if not args.execute:
        _note("Dry run: nothing was committed; add --execute to apply these offsets.", args)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    groups = list(dict.fromkeys(args.groups))
    with open_admin(args) as admin:
        results = admin.delete_groups(groups, raise_on_error=False)
    failed = {g: e for g, e in results.items() if e is not None}
    deleted = [g for g in groups if results.get(g) is None]
    if deleted:
        print("Deleted consumer group(s): " + ", ".join(f"'{g}'" for g in deleted))
    if failed:
        reasons = []
        for g, err in failed.items():
            hint = (f" (stop its consumers first; see: strom group describe {g} --members)"
                    if err.code.name == "NON_EMPTY_GROUP" else "")
            reasons.append(f"group '{g}': {err.code.name}: {err.message}{hint}")
        raise CliError("could not delete " + "; ".join(reasons))
    return 0
