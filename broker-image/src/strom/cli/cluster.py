"""``strom cluster describe``: cluster id, controller and brokers (like kafka-cluster.sh)."""

from __future__ import annotations

import argparse
from typing import Any

from strom.cli.common import add_bootstrap_flag, open_admin
from strom.cli.output import add_output_flag, format_table, render


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = sub.add_parser("cluster", help="describe the cluster",
                             description="Cluster-level information.")
    cmds = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)
    describe = cmds.add_parser("describe", help="cluster id, controller and brokers",
                               description="Show the cluster id, the controller and the brokers.")
    add_output_flag(describe)
    add_bootstrap_flag(describe)
    describe.set_defaults(func=cmd_describe)


def cluster_to_dict(desc: Any) -> dict[str, Any]:
    return {
        "cluster_id": desc.cluster_id,
        "controller_id": desc.controller_id,
        "brokers": [
            {"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack or None}
            for b in sorted(desc.brokers, key=lambda b: b.broker_id)
        ],
    }


def cluster_table(data: dict[str, Any]) -> str:
    head = f"ClusterId: {data['cluster_id']}  ControllerId: {data['controller_id']}"
    rows = [
        [b["id"], f"{b['host']}:{b['port']}", b["rack"],
         "yes" if b["id"] == data["controller_id"] else ""]
        for b in data["brokers"]
    ]
    return head + "\n" + format_table(("BROKER", "ADDRESS", "RACK", "CONTROLLER"), rows)


def cmd_describe(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        desc = admin.describe_cluster()
    data = cluster_to_dict(desc)
    print(render(data, args.output, cluster_table(data)))
    return 0
