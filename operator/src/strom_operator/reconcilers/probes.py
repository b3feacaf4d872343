"""The operator's one network probe: can it open a TCP connection to a broker's port?

Used to tell whether a StromCluster's NetworkPolicy is enforced
(:func:`strom_operator.model.environment.network_policy`): the policy allows the operator only the
gRPC port, so reaching the Kafka port means nothing enforces it.  Three answers: connected
(True), no answer within the timeout (False: dropped, as enforcing plugins do), or could not tell
(None with the reason: refused, unresolvable, ...).
"""

from __future__ import annotations

import socket
from typing import Protocol


class PortProbe(Protocol):
    def __call__(self, host: str, port: int) -> tuple[bool | None, str]: ...


def tcp_probe(host: str, port: int, timeout: float = 2.0) -> tuple[bool | None, str]:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, "connected"
    except TimeoutError:
        return False, f"no answer within {timeout:.0f} s"
    except OSError as err:
        return None, f"{type(err).__name__}: {err}"
