"""Flags shared by the commands that talk to a cluster, and the client objects they open.

The client package is imported here, lazily, so ``strom --help`` and ``strom dev ...`` start fast
and the layering (cli > client > protocol) has one door.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from strom.cli.parsing import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP, default_bootstrap, parse_bootstrap

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


def bootstrap(args: argparse.Namespace) -> str:
    value = getattr(args, "bootstrap_server", None)
    return parse_bootstrap(value if value is not None else default_bootstrap())


@contextlib.contextmanager
def open_admin(args: argparse.Namespace) -> Iterator[Admin]:
    servers = bootstrap(args)
    from strom.client import Admin

    admin = Admin(servers)
    try:
        yield admin
    finally:
        admin.close()
