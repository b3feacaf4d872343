"""``strom cluster describe``: brokers, controller quorum and partition health (kafka-cluster.sh
plus the under-replicated/offline counts of kafka-topics --describe); ``strom cluster
unregister``: forget a broker removed for good (kafka-cluster.sh unregister)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from strom.cli.common import add_bootstrap_flag, open_admin
from strom.cli.output import add_output_flag, format_table, render


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = sub.add_parser("cluster", help="describe the cluster",
                             description="Cluster-level information.")
    cmds = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)
    describe = cmds.add_parser(
        "describe", help="brokers, controller quorum and partition health",
        description="Show the cluster id, every registered broker (address, rack, alive or "
        "fenced, controller voter), the active controller, the metadata offset, and how many "
        "partitions are under-replicated (ISR smaller than the replicas), under min ISR (ISR "
        "smaller than min.insync.replicas: acks=all writes are refused, and for "
        "__consumer_offsets group metadata cannot be stored) or offline (no leader), naming "
        "the partitions under min ISR. Exit 0 even when some are: this describes, it does not "
        "judge.")
    add_output_flag(describe)
    add_bootstrap_flag(describe)
    describe.set_defaults(func=cmd_describe)
    unregister = cmds.add_parser(
        "unregister", help="forget a broker that was removed for good",
        description="Remove a stopped broker from the cluster metadata (like kafka-cluster.sh "
        "unregister). Refused while the broker is alive or still hosts a replica: move its "
        "replicas away first with 'strom reassign'.")
    unregister.add_argument("--broker-id", type=int, required=True, metavar="N",
                            help="the broker to forget")
    add_bootstrap_flag(unregister)
    unregister.set_defaults(func=cmd_unregister)


def partition_health(topics: Iterable[Any]) -> dict[str, Any]:
    """Counts like Kafka's UnderReplicated / UnderMinIsr / OfflinePartitionsCount, and the
    partitions below min.insync.replicas by name (acks=all writes to them are refused, and
    for ``__consumer_offsets`` the groups they coordinate cannot store anything)."""
    total = under = offline = offline_replicas = 0
    below_min: list[str] = []
    for t in topics:
        min_isr = int(getattr(t, "min_insync_replicas", 0))
        for p in t.partitions:
            total += 1
            if p.leader < 0:
                offline += 1
            offline_replicas += len(getattr(p, "offline_replicas", ()))
            if len(p.isr) < len(p.replicas):
                under += 1
            if min_isr and p.leader >= 0 and len(p.isr) < min_isr:
                below_min.append(f"{t.name}-{p.partition}")
    return {"total": total, "under_replicated": under, "under_min_isr": len(below_min),
            "offline": offline, "offline_replicas": offline_replicas,
            "under_min_isr_partitions": below_min}


def cluster_to_dict(desc: Any, topics: Iterable[Any] = ()) -> dict[str, Any]:
    fenced = set(getattr(desc, "fenced_broker_ids", ()))
    voters = list(getattr(desc, "voters", ()))
    topic_list = list(topics)
    return {
        "cluster_id": desc.cluster_id,
        "controller_id": desc.controller_id,
        "voters": voters,
        "metadata_offset": getattr(desc, "metadata_offset", -1),
        "answered_by": getattr(desc, "answered_by", -1),
        "offline_log_dirs": list(getattr(desc, "offline_log_dirs", ())),
        "brokers": [
            {"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack or None,
             "state": "fenced" if b.broker_id in fenced else "alive",
             "offline_log_dirs": list(getattr(b, "offline_log_dirs", ())),
             "voter": b.broker_id in voters, "controller": b.broker_id == desc.controller_id}
            for b in sorted(desc.brokers, key=lambda b: b.broker_id)
        ],
        "topics": len(topic_list),
        "partitions": partition_health(topic_list),
    }


def cluster_table(data: dict[str, Any]) -> str:
    offset = data["metadata_offset"]
    head = (f"ClusterId: {data['cluster_id']}  Controller: {data['controller_id']}  "
            f"Voters: {','.join(str(v) for v in data['voters']) or '-'}  "
            f"MetadataOffset: {offset if offset >= 0 else '-'}"
            + (f" (broker {data['answered_by']})" if data["answered_by"] >= 0 else ""))
    rows = [
        [b["id"], f"{b['host']}:{b['port']}", b["rack"], b["state"],
         "yes" if b["voter"] else "", "yes" if b["controller"] else ""]
        for b in data["brokers"]
    ]
    parts = data["partitions"]
    foot = (f"Topics: {data['topics']}  Partitions: {parts['total']}  "
            f"UnderReplicated: {parts['under_replicated']}  "
            f"UnderMinIsr: {parts['under_min_isr']}  Offline: {parts['offline']}  "
            f"OfflineReplicas: {parts.get('offline_replicas', 0)}")
    lines = [head, format_table(
        ("BROKER", "ADDRESS", "RACK", "STATE", "VOTER", "CONTROLLER"), rows), foot]
    below = parts["under_min_isr_partitions"]
    if below:
        shown = ", ".join(below[:10]) + (f" (+{len(below) - 10} more)" if len(below) > 10 else "")
        lines.append(f"Unhealthy: below min.insync.replicas (acks=all writes refused): {shown}")
    listed: set[tuple[int, str]] = set()
    for b in data["brokers"]:  # from the cluster metadata: every broker's failed directories
        for d in b.get("offline_log_dirs", ()):
            listed.add((b["id"], d.split(": ", 1)[0]))
            lines.append(f"OfflineLogDir (broker {b['id']}): {d}")
    lines += [f"OfflineLogDir (broker {data['answered_by']}): {d}"  # not yet in the metadata
              for d in data.get("offline_log_dirs", ())
              if (data["answered_by"], d.split(": ", 1)[0]) not in listed]
    return "\n".join(lines)


def cmd_describe(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        desc = admin.describe_cluster()
        topics = admin.describe_topics(None, include_internal=True)
    data = cluster_to_dict(desc, topics)
    print(render(data, args.output, cluster_table(data)))
    return 0


def cmd_unregister(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        admin.unregister_broker(args.broker_id)
    print(f"Broker {args.broker_id} unregistered.")
    return 0
