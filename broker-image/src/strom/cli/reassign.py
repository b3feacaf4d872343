"""``strom reassign plan|execute|status|cancel``: move partition replicas between brokers.

``plan`` proposes a reassignment (the pure planner in ``strom.client.reassign_plan``) and prints
it with the current assignment, in Kafka's file format; ``execute`` starts it (optionally
throttled) and prints the assignment to roll back to; ``status`` shows the moves in flight with
their progress (``--watch`` redraws until they are done); ``cancel`` stops them, leaving each
partition on its original replicas. Rendering is in ``reassign_view.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.cli import reassign_view as view
from strom.cli.common import add_bootstrap_flag, open_admin
from strom.cli.errors import CliError, UsageError
from strom.cli.output import add_output_flag, format_json, render
from strom.cli.parsing import parse_int_list, parse_name_list, parse_size

if TYPE_CHECKING:
    from strom.client import Admin

PartitionKey = tuple[str, int]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reassign = sub.add_parser(
        "reassign", help="move partition replicas between brokers",
        description="Plan, execute, watch and cancel partition reassignments "
        "(like kafka-reassign-partitions). Typical flow: plan --plan-file p.json, execute --plan "
        "p.json, status --plan p.json --watch.")
    cmds = reassign.add_subparsers(dest="reassign_command", metavar="COMMAND", required=True)

    plan = cmds.add_parser(
        "plan", help="propose a reassignment of topics onto brokers",
        description="Propose new replicas for every partition of --topics on exactly --brokers: "
        "as few replicas moved as possible, replicas and leaders spread evenly, racks used when "
        "known. Prints the current and the proposed assignment (Kafka's reassignment JSON); "
        "changes nothing.")
    plan.add_argument("--topics", required=True, metavar="A,B", help="topics to move")
    plan.add_argument("--brokers", required=True, metavar="IDS",
                      help="broker ids the partitions should live on, e.g. 2,3,4")
    plan.add_argument("--replication-factor", type=int, default=None, metavar="N",
                      help="replicas per partition (default: keep each partition's)")
    plan.add_argument("--plan-file", type=Path, default=None, metavar="FILE",
                      help="also write the proposed plan to FILE (for execute --plan)")
    add_output_flag(plan)
    add_bootstrap_flag(plan)
    plan.set_defaults(func=cmd_plan)

    execute = cmds.add_parser(
        "execute", help="start the reassignment of a plan file",
        description="Start moving the partitions of --plan to their new replicas. Prints the "
        "current assignment first: save it to roll back (execute it as a plan).")
    execute.add_argument("--plan", type=Path, required=True, metavar="FILE",
                         help="reassignment JSON from 'strom reassign plan'")
    throttle = execute.add_mutually_exclusive_group()
    throttle.add_argument("--throttle", default=None, metavar="SIZE",
                          help="cap the copy rate of added replicas per broker and second "
                          "(each broker sends at most SIZE/s as leader and fetches at most "
                          "SIZE/s as follower, as Kafka's --throttle), e.g. 10MB, 512KiB "
                          "(default: keep the current throttle)")
    throttle.add_argument("--no-throttle", action="store_true",
                          help="remove the cluster's replication throttle")
    execute.add_argument("--validate-only", action="store_true",
                         help="check the plan with the controller without starting it")
    add_output_flag(execute)
    add_bootstrap_flag(execute)
    execute.set_defaults(func=cmd_execute)

    status = cmds.add_parser(
        "status", help="reassignments in progress and how far they are",
        description="Show the reassignments in flight: replicas, adding, removing, progress % "
        "and offsets behind the leader, and the replication throttle. With --plan, also check "
        "the plan's partitions reached their target replicas, and remove the throttle once they "
        "all did. Exit 0 when nothing is moving (or --plan is complete), 1 otherwise.")
    status.add_argument("--topics", default=None, metavar="A,B", help="only these topics")
    status.add_argument("--plan", type=Path, default=None, metavar="FILE",
                        help="the plan executed: report each of its partitions done or not")
    status.add_argument("--preserve-throttle", action="store_true",
                        help="with --plan: keep the replication throttle when the plan is done "
                        "(default: remove it, as kafka-reassign-partitions --verify does)")
    status.add_argument("--watch", action="store_true",
                        help="redraw every --interval seconds until done (bounded by --timeout)")
    status.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                        help="redraw interval of --watch (default: 1)")
    status.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                        help="give up watching after this long, exit 1 (default: 600)")
    add_output_flag(status)
    add_bootstrap_flag(status)
    status.set_defaults(func=cmd_status)

    cancel = cmds.add_parser(
        "cancel", help="cancel reassignments in progress",
        description="Cancel the reassignments of the partitions of --plan, or of every "
        "partition of --topics that is moving. Cancelled partitions go back to their original "
        "replicas.")
    which = cancel.add_mutually_exclusive_group(required=True)
    which.add_argument("--plan", type=Path, default=None, metavar="FILE",
                       help="cancel the partitions of this plan")
    which.add_argument("--topics", default=None, metavar="A,B",
                       help="cancel every reassignment in flight for these topics")
    add_output_flag(cancel)
    add_bootstrap_flag(cancel)
    cancel.set_defaults(func=cmd_cancel)


# --- plan ------------------------------------------------------------------------------------


def current_assignment(admin: Admin, topics: Sequence[str]) -> dict[PartitionKey, list[int]]:
    return {(t.name, p.partition): list(p.replicas)
            for t in admin.describe_topics(list(topics)) for p in t.partitions}


def cmd_plan(args: argparse.Namespace) -> int:
    from strom.client.reassign_plan import moved_replicas, plan_reassignment, plan_to_json

    topics = parse_name_list(args.topics, "--topics")
    brokers = parse_int_list(args.brokers, "--brokers")
    if args.replication_factor is not None and args.replication_factor < 1:
        raise UsageError(f"--replication-factor {args.replication_factor} must be at least 1")
    with open_admin(args) as admin:
        cluster = admin.describe_cluster()
        known = {b.broker_id: b.rack for b in cluster.brokers}
        missing = [b for b in brokers if b not in known]
        if missing:
            raise CliError(f"--brokers: broker(s) {view.ids(missing)} are not in the cluster "
                           f"(registered: {view.ids(sorted(known))}); check 'strom cluster "
                           "describe'")
        current = current_assignment(admin, topics)
    racks = {b: known[b] for b in brokers} if any(known[b] for b in brokers) else None
    proposed = plan_reassignment(current, brokers, racks=racks,
                                 replication_factor=args.replication_factor)
    data = {"current": plan_to_json(current), "proposed": plan_to_json(proposed),
            "moved_replicas": moved_replicas(current, proposed)}
    if args.plan_file is not None:
        args.plan_file.write_text(format_json(data["proposed"]) + "\n")
    text = (f"Current partition replica assignment\n{json.dumps(data['current'])}\n\n"
            f"Proposed partition reassignment configuration\n{json.dumps(data['proposed'])}\n\n"
            f"{data['moved_replicas']} replica(s) to copy"
            + (f"; plan written to {args.plan_file}" if args.plan_file is not None else
               "; save the proposed JSON and run: strom reassign execute --plan FILE"))
    print(render(data, args.output, text))
    return 0


# --- execute / cancel ------------------------------------------------------------------------


def read_plan(path: Path) -> dict[PartitionKey, list[int]]:
    """A plan file: Kafka's format, or this tool's ``plan -o json`` output (its "proposed")."""
    from strom.client.reassign_plan import parse_plan

    try:
        text = path.read_text()
    except OSError as err:
        raise CliError(f"--plan {path}: {err.strerror or err}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        raw = None
    if isinstance(raw, dict) and isinstance(raw.get("proposed"), dict):
        text = json.dumps(raw["proposed"])
    plan = parse_plan(text, str(path))
    if not plan:
        raise CliError(f"--plan {path} lists no partitions; nothing to do")
    return plan


def throttle_of(args: argparse.Namespace) -> int:
    if args.no_throttle:
        return -1
    if args.throttle is None:
        return 0
    return parse_size(args.throttle, "--throttle")


def cmd_execute(args: argparse.Namespace) -> int:
    from strom.client.reassign_plan import plan_to_json

    plan = read_plan(args.plan)
    throttle = throttle_of(args)
    with open_admin(args) as admin:
        topics = sorted({t for t, _ in plan})
        current = current_assignment(admin, topics)
        unknown = sorted(k for k in plan if k not in current)
        if unknown:
            raise CliError(f"--plan {args.plan}: {view.partitions(unknown)} do(es) not exist; "
                           "check the topic names and partition numbers")
        rollback = plan_to_json({k: current[k] for k in plan})
        if args.output == "table":
            print("Current partition replica assignment (save it to roll back: strom reassign "
                  f"execute --plan ROLLBACK.json)\n{json.dumps(rollback)}\n", flush=True)
        results = admin.alter_partition_reassignments(
            dict(plan.items()), throttle_bytes_per_sec=throttle,
            validate_only=args.validate_only, raise_on_error=False)
    rows = view.results_data(results)
    failed = [r for r in rows if r["error"]]
    verb = "validated" if args.validate_only else "started"
    summary = (f"Reassignment {verb} for {len(rows) - len(failed)} of {len(rows)} partition(s)"
               + (f", throttled to {throttle} bytes/s" if throttle > 0 else "")
               + (", throttle removed" if throttle < 0 else "")
               + ("" if args.validate_only or failed else
                  f". Follow it with: strom reassign status --plan {args.plan} --watch"))
    data = {"rollback": rollback, "results": rows, "throttle_bytes_per_sec": throttle}
    print(render(data, args.output, view.results_table(rows, summary)))
    return 1 if failed else 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        if args.plan is not None:
            keys = sorted(read_plan(args.plan))
        else:
            topics = parse_name_list(args.topics, "--topics")
            keys = [(r.topic, r.partition)
                    for r in admin.list_partition_reassignments(topics)]
        if not keys:
            print(render({"results": []}, args.output, "No reassignment in progress to cancel."))
            return 0
        results = admin.alter_partition_reassignments(
            dict.fromkeys(keys), raise_on_error=False)
    rows = view.results_data(results)
    failed = [r for r in rows if r["error"]]
    summary = f"Cancelled the reassignment of {len(rows) - len(failed)} of {len(rows)} partition(s)"
    print(render({"results": rows}, args.output, view.results_table(rows, summary)))
    return 1 if failed else 0


# --- status ----------------------------------------------------------------------------------


def snapshot(admin: Admin, topics: list[str] | None,
             plan: Mapping[PartitionKey, list[int]] | None) -> dict[str, Any]:
    """One look at the cluster: the moves in flight and, for a plan, which partitions are done."""
    if plan is not None and topics is None:
        topics = sorted({t for t, _ in plan})
    moving = admin.list_partition_reassignments(topics)
    data: dict[str, Any] = {"reassignments": [view.reassignment_data(r) for r in moving]}
    done = not moving
    if plan is not None:
        current = current_assignment(admin, sorted({t for t, _ in plan}))
        in_flight = {(r.topic, r.partition) for r in moving}
        data["plan"] = view.plan_progress(plan, current, in_flight)
        done = all(p["done"] for p in data["plan"])
    data["done"] = done
    data["throttle_bytes_per_sec"] = admin.replication_throttle()
    return data


def cmd_status(args: argparse.Namespace) -> int:
    topics = parse_name_list(args.topics, "--topics") if args.topics else None
    plan = read_plan(args.plan) if args.plan is not None else None
    if args.interval <= 0 or args.timeout <= 0:
        raise UsageError("--interval and --timeout must be positive")
    deadline = time.monotonic() + args.timeout
    redraw = args.watch and args.output == "table" and sys.stdout.isatty()
    with open_admin(args) as admin:
        while True:
            data = snapshot(admin, topics, plan)
            if redraw:
                sys.stdout.write("\x1b[H\x1b[2J")
            if data["done"] and plan is not None and data["throttle_bytes_per_sec"] \
                    and not args.preserve_throttle:
                # Kafka's --verify: a finished reassignment should not keep throttling
                admin.set_replication_throttle(None)
                data["throttle_removed"] = True
            print(render(data, args.output, view.status_table(data)), flush=True)
            if data["done"] or not args.watch:
                return 0 if data["done"] else 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise CliError(f"reassignment not done after --timeout {args.timeout:g} s; "
                               "it continues in the cluster (cancel it with strom reassign "
                               "cancel)")
            time.sleep(min(args.interval, left))
            if not redraw and args.output == "table":
                print()
