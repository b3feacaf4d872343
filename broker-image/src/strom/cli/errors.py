"""The exceptions commands raise to end with one clear line on stderr and an exit code.

``main`` turns these (and client, config, gRPC and OS errors) into ``strom: error: ...`` and the
exit code; nothing below ``main`` prints errors itself or calls ``sys.exit``.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1  # operational: unknown topic, broker unreachable, verification failed
EXIT_USAGE = 2  # bad flags or values (argparse's own code)
EXIT_INTERRUPTED = 130  # Ctrl-C


class CliError(Exception):
    """An operational error: one line that names the field or flag and the fix."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(CliError):
    """A combination of flags argparse cannot check by itself (exit 2, like argparse)."""

    exit_code = EXIT_USAGE
