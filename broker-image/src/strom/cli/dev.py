"""``strom dev``: a local cluster on embedded defaults, in the background, and the demo.

``up`` starts it (or reports the one already running in ``--data-dir``), ``down`` stops it,
``status`` shows it, ``demo`` runs the platform end to end. The process management is in
``localcluster.py``; the demo in ``demo.py``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from strom.cli import localcluster as lc
from strom.cli.errors import CliError
from strom.cli.invocation import strom_invocation
from strom.cli.output import add_output_flag, format_table, render
from strom.cli.parsing import BOOTSTRAP_ENV, parse_kv_list


def _data_dir_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", type=Path, default=Path(lc.DEFAULT_DATA_DIR), metavar="DIR",
                   help=f"where the cluster keeps its logs, data and cluster.json "
                   f"(default: ./{lc.DEFAULT_DATA_DIR})")


def _base_port_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-port", type=int, default=lc.FIRST_PORT, metavar="PORT",
                   help=f"gRPC port of broker 0, then +1 per broker; busy ports are replaced by "
                   f"random free ones; 0 = all random (default: {lc.FIRST_PORT})")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = sub.add_parser("dev", help="a local cluster for development, and the demo",
                         description="Run a local Strom cluster on 127.0.0.1 in the background.")
    cmds = dev.add_subparsers(dest="dev_command", metavar="COMMAND", required=True)

    up = cmds.add_parser(
        "up", help="start a local cluster in the background",
        description="Start a local cluster on embedded defaults in the background, wait until "
        "it is ready and print its bootstrap address. Ports 9092.. and 9404.. when free.",
    )
    up.add_argument("--brokers", type=int, default=1, metavar="N",
                    help=f"number of brokers, 1..{lc.MAX_BROKERS} (default: 1). With more than "
                    "one, the first three also run the controller quorum, topics default to "
                    "replication factor min(N, 3) and min.insync.replicas one less")
    _data_dir_flag(up)
    up.add_argument("--set", action="append", metavar="KEY=VALUE", dest="overrides",
                    help="broker config for every broker, e.g. --set num.partitions=3")
    _base_port_flag(up)
    up.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                    help="how long to wait for readiness and registration (default: 60)")
    add_output_flag(up, choices=("text", "json"), default="text")
    up.set_defaults(func=cmd_up)

    down = cmds.add_parser("down", help="stop the local cluster",
                           description="Stop the local cluster: SIGTERM, then SIGKILL after "
                           "--timeout. Data stays unless --delete-data.")
    _data_dir_flag(down)
    down.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS",
                      help="grace period before SIGKILL (default: 15)")
    down.add_argument("--delete-data", action="store_true",
                      help="also delete the data dir (topics, logs)")
    down.set_defaults(func=cmd_down)

    status = cmds.add_parser("status", help="show the local cluster's brokers",
                             description="Show the brokers of the local cluster: pid, address, "
                             "alive, ready. Exit 0 when all are ready, 1 otherwise.")
    _data_dir_flag(status)
    add_output_flag(status)
    status.set_defaults(func=cmd_status)

    from strom.cli import demo

    demo.register(cmds, _data_dir_flag, _base_port_flag)


def progress(message: str) -> None:
    print(f"strom: {message}", file=sys.stderr, flush=True)


def cmd_up(args: argparse.Namespace) -> int:
    lc.check_broker_count(args.brokers)
    overrides = parse_kv_list(args.overrides, "--set")
    data_dir: Path = args.data_dir
    with lc.locked(data_dir):
        state = lc.running_state(data_dir)
        if state is not None:
            if len(state.brokers) != args.brokers:
                raise CliError(
                    f"a {len(state.brokers)}-broker dev cluster already runs in {data_dir}; "
                    f"stop it first: {strom_invocation()} dev down --data-dir {data_dir}"
                )
            progress(f"a dev cluster is already running in {data_dir}")
        else:
            layout = lc.load_layout(data_dir)
            if layout is not None:
                lc.check_restart(layout, args.brokers, data_dir)
                if layout.brokers < args.brokers:
                    progress(f"{data_dir} held {layout.brokers} broker(s); adding "
                             f"{args.brokers - layout.brokers}, controller voters stay "
                             f"{', '.join(map(str, layout.voters))} (a quorum's voters do not "
                             f"change on restart)")
            state = lc.plan_cluster(data_dir, args.brokers, base_port=args.base_port,
                                    voters=layout.voters if layout is not None else None)
            state.overrides = overrides
            took = lc.start_cluster(state, args.timeout, progress)
            if layout is not None and args.brokers > 1:
                # brokers were added now or in a start that stopped before this step
                lc.raise_internal_replication(state, args.timeout, progress)
            progress(f"cluster ready in {took:.1f} s")
    if args.output == "json":
        print(state.to_json(), end="")
        return 0
    print(f"Strom dev cluster running: {len(state.brokers)} broker(s), data in {state.data_dir}")
    if len(state.brokers) > 1:
        print(f"Controller voters: {', '.join(str(v) for v in state.voters)} (combined mode); "
              f"default replication factor {state.cluster_config['default.replication.factor']}, "
              f"min.insync.replicas {state.cluster_config['min.insync.replicas']}")
    print(f"Bootstrap: {state.bootstrap}")
    print(f"  export {BOOTSTRAP_ENV}={state.bootstrap}")
    if state.kafka_bootstrap:
        print(f"Kafka clients: bootstrap.servers={state.kafka_bootstrap}")
    print(f"Stop it with: {strom_invocation()} dev down --data-dir {data_dir}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir
    with lc.locked(data_dir):
        state = lc.load_state(data_dir)
        if state is None:
            print(f"No dev cluster recorded in {data_dir}; nothing to stop.")
        else:
            results = lc.stop_cluster(state, args.timeout, progress)
            lc.state_path(data_dir).unlink(missing_ok=True)
            for r in results:
                print(f"Broker {r.broker_id} (pid {r.pid}): {r.outcome}.")
    if args.delete_data and data_dir.exists():
        shutil.rmtree(data_dir)
        print(f"Deleted {data_dir}.")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir
    state = lc.load_state(data_dir)
    if state is None:
        raise CliError(f"no dev cluster recorded in {data_dir}; start one with "
                       f"{strom_invocation()} dev up "
                       f"--data-dir {data_dir}")
    statuses = lc.cluster_status(state)
    view = _cluster_view(state) if any(s.alive for s in statuses) else None
    fenced = set(view.fenced_broker_ids) if view is not None else set()
    registered = {b.broker_id for b in view.brokers} if view is not None else set()
    brokers = []
    for s in statuses:
        row = s.as_dict()
        row["registered"] = None if view is None else s.broker_id in registered
        row["fenced"] = None if view is None else s.broker_id in fenced
        brokers.append(row)
    data = {
        "data_dir": state.data_dir,
        "bootstrap": state.bootstrap,
        "kafka_bootstrap": state.kafka_bootstrap,
        "controller_id": None if view is None else view.controller_id,
        "voters": state.voters,
        "brokers": brokers,
    }
    controller = "-" if view is None else str(view.controller_id)
    table = (
        f"Data dir: {state.data_dir}  Bootstrap: {state.bootstrap}  Controller: {controller}\n"
        + format_table(
            ("BROKER", "PID", "ADDRESS", "KAFKA", "METRICS", "ALIVE", "READY", "VOTER", "FENCED",
             "LOG"),
            [[b["broker_id"], b["pid"], b["address"], b["kafka"] or "-", b["metrics_port"],
              b["alive"], b["ready"], b["voter"], b["fenced"], b["log_file"]] for b in brokers],
        )
    )
    print(render(data, args.output, table))
    healthy = all(s.ready for s in statuses) and not fenced
    return 0 if healthy else 1


def _cluster_view(state: lc.ClusterState) -> Any:
    """DescribeCluster if a broker answers within a second or two, else None (status still
    shows the processes: it must work when the cluster is half down)."""
    try:
        return lc.describe_cluster(state, timeout_ms=1500)
    except Exception:  # any failure: the process table alone is still useful
        return None
