"""A dedicated controller process (``python -m strom.controller``) for tests.

Dedicated controller mode and the controller quorum are tested against real processes; they are
launched like every other server the project starts, through :mod:`strom.testing.process` (own
session, output in a log file that starts with a banner, reaped, killed by a finalizer if a test
drops it), so a test that starts one is marked ``integration`` by the same run-time check and an
error carries the log's tail. Readiness is the caller's: a lone voter and a quorum are ready at
different moments (a leader elected, an image applied), which the tests wait for themselves.
"""

from __future__ import annotations

import sys
from pathlib import Path

from strom.testing.process import ManagedProcess

__all__ = ["controller_process"]


def controller_process(node_id: int, voters: str, data_dir: Path | str, log_path: Path | str,
                       *extra_args: str) -> ManagedProcess:
    """A not yet started ``python -m strom.controller`` voter ``node_id`` of ``voters``
    (``id@host:port,...``) keeping its log in ``data_dir``; ``extra_args`` are further flags
    (``--election-timeout-ms``, ...). Start it with :meth:`ManagedProcess.start`; starting it
    again after it stopped appends to the same log file."""
    argv = [sys.executable, "-m", "strom.controller", "--node-id", str(node_id),
            "--voters", voters, "--data-dir", str(data_dir), *extra_args]
    return ManagedProcess(argv, log_path, name=f"controller {node_id}")
