"""``python -m strom.controller``: run one dedicated controller (a voter of the metadata quorum).

Example, three voters on one machine::

    python -m strom.controller --node-id 0 --data-dir /tmp/c0 \\
        --voters 0@127.0.0.1:9093,1@127.0.0.1:9094,2@127.0.0.1:9095

The node listens on its own entry of ``--voters`` (or ``--port``), keeps its Raft log under
``--data-dir``, and logs ``strom controller N is the leader in term T`` when it wins an election.
Bad arguments print one line and exit 2; SIGTERM stops it gracefully (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from strom.controller.active import ControllerSettings
from strom.controller.quorum_server import ControllerConfig, parse_voters, serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m strom.controller", description="Run one Strom controller (Raft voter)."
    )
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--voters", required=True, help="ID@HOST:PORT,... (all voters)")
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="default: this node's voter port")
    parser.add_argument("--election-timeout-ms", type=int, default=1000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=250)
    parser.add_argument(
        "--compact-every",
        type=int,
        default=1000,
        help="snapshot the metadata image every N applied entries",
    )
    parser.add_argument(
        "--session-timeout-ms",
        type=int,
        default=ControllerSettings.session_timeout_ms,
        help="fence a broker without a heartbeat for this long (3000)",
    )
    parser.add_argument(
        "--cluster-id", default="", help="the cluster id a new cluster gets (default: random)"
    )
    parser.add_argument(
        "--leader-imbalance-check-ms",
        type=int,
        default=ControllerSettings.leader_imbalance_check_ms,
        help="how often preferred leaders get their leadership back (30000)",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = ControllerConfig(
            node_id=args.node_id,
            voters=parse_voters(args.voters),
            data_dir=args.data_dir,
            host=args.host,
            port=args.port,
            election_timeout_ms=args.election_timeout_ms,
            heartbeat_interval_ms=args.heartbeat_interval_ms,
            compact_every=args.compact_every,
            controller=ControllerSettings(
                session_timeout_ms=args.session_timeout_ms,
                cluster_id=args.cluster_id,
                leader_imbalance_check_ms=args.leader_imbalance_check_ms,
            ),
        )
        if args.session_timeout_ms <= 0 or args.leader_imbalance_check_ms <= 0:
            raise ValueError("--session-timeout-ms and --leader-imbalance-check-ms must be > 0")
        config.raft_config()
        config.listen_port()
    except ValueError as err:
        print(f"strom controller: {err}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(serve(config))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
