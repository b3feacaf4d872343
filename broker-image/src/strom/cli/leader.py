"""``strom leader elect``: preferred or unclean leader election (kafka-leader-election).

Preferred election moves leadership back to each partition's first replica when it is in sync
(after a broker restart, or after ``strom reassign`` changed the replica order). Unclean election
picks an out-of-sync replica when no in-sync one is alive: acknowledged records may be lost, so it
must be asked for explicitly.
"""

from __future__ import annotations

import argparse

from strom.cli import reassign_view as view
from strom.cli.common import add_bootstrap_flag, open_admin
from strom.cli.errors import UsageError
from strom.cli.output import add_output_flag, render


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    leader = sub.add_parser("leader", help="partition leader elections",
                            description="Partition leadership.")
    cmds = leader.add_subparsers(dest="leader_command", metavar="COMMAND", required=True)
    elect = cmds.add_parser(
        "elect", help="elect the preferred (or an unclean) leader",
        description="Elect each partition's preferred leader (its first replica) if it is in "
        "sync, for one partition (--topic T --partition P), every partition of a topic "
        "(--topic T) or every partition (no flags). Partitions already led by their preferred "
        "replica are left alone. --unclean elects an out-of-sync replica where no in-sync one "
        "is alive (acknowledged records may be lost).")
    elect.add_argument("--topic", default=None, metavar="TOPIC")
    elect.add_argument("--partition", type=int, default=None, metavar="N",
                       help="one partition of --topic")
    elect.add_argument("--unclean", action="store_true",
                       help="unclean election: may lose acknowledged records")
    add_output_flag(elect)
    add_bootstrap_flag(elect)
    elect.set_defaults(func=cmd_elect)


def cmd_elect(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    if args.partition is not None and args.partition < 0:
        raise UsageError(f"--partition {args.partition} must be >= 0")
    election = "unclean" if args.unclean else "preferred"
    with open_admin(args) as admin:
        wanted: list[tuple[str, int]] | None = None
        if args.topic is not None and args.partition is not None:
            wanted = [(args.topic, args.partition)]
        elif args.topic is not None:
            (desc,) = admin.describe_topics([args.topic])
            wanted = [(args.topic, p.partition) for p in desc.partitions]
        results = admin.elect_leaders(wanted, election, raise_on_error=False)
    rows = view.results_data(results)
    failed = [r for r in rows if r["error"]]
    summary = (f"{election.capitalize()} leader election succeeded (or was not needed) for "
               f"{len(rows) - len(failed)} of {len(rows)} partition(s)" if rows else
               "No partition needed a leader election (every one is led by its "
               + ("preferred replica)" if election == "preferred" else "an in-sync replica)"))
    print(render({"election": election, "results": rows}, args.output,
                 view.results_table(rows, summary)))
    return 1 if failed else 0
