"""Flags shared by the commands that talk to a cluster, and the client objects they open.

The client package is imported here, lazily, so ``strom --help`` and ``strom dev ...`` start fast
and the layering (cli > client > protocol) has one door.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from strom.cli.errors import UsageError
from strom.cli.parsing import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP, default_bootstrap, parse_bootstrap

DEFAULT_REQUEST_TIMEOUT_MS = 10_000

if TYPE_CHECKING:
    from strom.client import Admin


def add_bootstrap_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=None,
        help=f"broker address(es), comma-separated (default: ${BOOTSTRAP_ENV}, "
        f"else {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--request-timeout-ms",
        type=int,
        default=DEFAULT_REQUEST_TIMEOUT_MS,
        metavar="MS",
        help=f"give up on a request (or an unreachable cluster) after MS "
        f"(default: {DEFAULT_REQUEST_TIMEOUT_MS})",
    )


def request_timeout_ms(args: argparse.Namespace) -> int:
    value = int(getattr(args, "request_timeout_ms", DEFAULT_REQUEST_TIMEOUT_MS))
    if value < 1:
        raise UsageError(f"--request-timeout-ms {value} must be at least 1")
    return value


def bootstrap(args: argparse.Namespace) -> str:
    value = getattr(args, "bootstrap_server", None)
    return parse_bootstrap(value if value is not None else default_bootstrap())


def partitions_of(args: argparse.Namespace, topic: str) -> list[int]:
    """The partition ids of ``topic`` (UNKNOWN_TOPIC_OR_PARTITION if it does not exist)."""
    with open_admin(args) as admin:
        (desc,) = admin.describe_topics([topic])
    return sorted(p.partition for p in desc.partitions)


@contextlib.contextmanager
def open_admin(args: argparse.Namespace) -> Iterator[Admin]:
    servers = bootstrap(args)
    timeout_ms = request_timeout_ms(args)
    from strom.client import Admin

    admin = Admin(servers, request_timeout_ms=timeout_ms)
    try:
        yield admin
    finally:
        admin.close()
