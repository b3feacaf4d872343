"""The ``strom`` entry point: the parser tree, and the one place errors become exit codes.

Every failure ends as one line on stderr, ``strom: error: ...``, and an exit code: 1 for
operational errors (a Kafka error code from the cluster, an unreachable broker, a failed
verification), 2 for usage errors (argparse's and ours), 130 on Ctrl-C. No traceback unless
``STROM_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from strom import __version__
from strom.cli import (
    broker_cmd,
    cluster,
    consume,
    dev,
    group,
    leader,
    offsets,
    produce,
    reassign,
    topic,
)
from strom.cli.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, CliError
from strom.protocol.errors import Handling, StromError, codes_with

DEBUG_ENV = "STROM_DEBUG"


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors that point at ``--help``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"strom: error: {message} (see: {self.prog} --help)\n")


def build_parser() -> Parser:
    parser = Parser(
        prog="strom",
        description="Strom: a Kafka-class streaming platform. Start with: strom dev demo",
        epilog="Commands that talk to a cluster take --bootstrap-server HOST:PORT (default: "
        "$STROM_BOOTSTRAP_SERVERS, else 127.0.0.1:9092). STROM_DEBUG=1 shows tracebacks.",
    )
    parser.add_argument("--version", action="version", version=f"strom {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (broker_cmd, dev, topic, produce, consume, offsets, group, cluster, reassign,
                   leader):
        module.register(sub)
    return parser


#: Error codes that usually mean "no broker at the bootstrap address".
UNREACHABLE = codes_with(Handling.UNREACHABLE)


def unreachable_hint(args: argparse.Namespace) -> str:
    from strom.cli.parsing import default_bootstrap

    where = getattr(args, "bootstrap_server", None) or default_bootstrap()
    return (
        f"is a broker running at {where}? Start one with 'strom dev up', or pass "
        "--bootstrap-server HOST:PORT"
    )


def describe_rpc_error(err: Any, args: argparse.Namespace) -> str:
    """One line for a gRPC error that reached the CLI without a Kafka error code."""
    code = err.code() if callable(getattr(err, "code", None)) else None
    name = getattr(code, "name", str(code))
    details = err.details() if callable(getattr(err, "details", None)) else str(err)
    if name in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
        return f"{name}: {details}; {unreachable_hint(args)}"
    return f"{name}: {details}"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def main(argv: Sequence[str] | None = None) -> int:
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        result = args.func(args)
        return int(result or 0)
    except KeyboardInterrupt:
        print("strom: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of our stdout went away (e.g. `strom consume t | head`): not an error.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as err:  # the one place every error becomes a line
        if debug:
            traceback.print_exc()
        code, message = classify(err, locals().get("args"))
        print(f"strom: error: {_one_line(message)}", file=sys.stderr)
        return code


def classify(err: BaseException, args: argparse.Namespace | None) -> tuple[int, str]:
    """(exit code, message) for any exception that reached ``main``."""
    if isinstance(err, CliError):
        return err.exit_code, err.message
    if isinstance(err, StromError):
        message = f"{err.code.name}: {err.message}"
        if err.code in UNREACHABLE and args is not None and hasattr(args, "bootstrap_server"):
            message += "; " + unreachable_hint(args)
        return EXIT_ERROR, message
    try:
        import grpc
    except ImportError:  # pragma: no cover - grpc is a dependency
        grpc = None  # type: ignore[assignment]
    if grpc is not None and isinstance(err, grpc.RpcError):
        return EXIT_ERROR, describe_rpc_error(err, args or argparse.Namespace())
    if isinstance(err, OSError):
        where = f": {err.filename}" if getattr(err, "filename", None) else ""
        return EXIT_ERROR, f"{err.strerror or err}{where}"
    return EXIT_ERROR, (
        f"unexpected {type(err).__name__}: {err} (run with {DEBUG_ENV}=1 for the traceback)"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
