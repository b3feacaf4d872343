"""``strom.protocol`` knows no transport: every module of it, the generated messages included,
loads without ``grpc``; the generated gRPC service stubs are ``strom.transport.v1``'s.

The import-linter contract says the same of the imports it sees; this runs them, in a fresh
interpreter, so a generated stub written back beside the messages (protoc's default) fails here.
"""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import importlib, pkgutil, sys
import strom.protocol as protocol
names = [m.name for m in pkgutil.walk_packages(protocol.__path__, "strom.protocol.")]
for name in names:
    importlib.import_module(name)
print(len(names), sorted(m for m in sys.modules if m == "grpc" or m.startswith(("grpc.", "grpc_"))))
"""


def test_every_protocol_module_loads_without_grpc() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split(maxsplit=1)
    count, loaded = int(out[0]), out[1].strip()
    assert count >= 10, f"only {count} modules of strom.protocol found"
    assert loaded == "[]", f"importing strom.protocol loaded {loaded}"


def test_the_service_stubs_are_the_transport_packages() -> None:
    from strom.protocol.v1 import admin_pb2, broker_pb2, group_pb2, quorum_pb2, replica_pb2
    from strom.transport.v1 import (
        admin_pb2_grpc,
        broker_pb2_grpc,
        group_pb2_grpc,
        quorum_pb2_grpc,
        replica_pb2_grpc,
    )

    for messages, stubs, service in ((admin_pb2, admin_pb2_grpc, "Admin"),
                                     (broker_pb2, broker_pb2_grpc, "Broker"),
                                     (group_pb2, group_pb2_grpc, "Group"),
                                     (quorum_pb2, quorum_pb2_grpc, "Quorum"),
                                     (replica_pb2, replica_pb2_grpc, "Replica")):
        assert service in messages.DESCRIPTOR.services_by_name
        assert hasattr(stubs, f"{service}Stub")
        assert hasattr(stubs, f"add_{service}Servicer_to_server")
