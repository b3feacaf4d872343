"""``python -m strom.testing.kube up --bin DIR | down | status`` (what ``./dev kube`` runs)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from strom.testing.kube import cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev kube", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the single-node cluster (cleans an earlier one)")
    up.add_argument("--bin", required=True, type=Path,
                    help="directory of the built binaries (kube/build.sh prints it)")
    sub.add_parser("down", help="stop and remove everything up made")
    sub.add_parser("status", help="what runs, node and DNS health")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "up":
            cluster.up(args.bin)
        elif args.cmd == "down":
            cluster.down()
        else:
            print(json.dumps(cluster.status(), indent=2))
    except cluster.KubeError as exc:
        print(f"kube: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
