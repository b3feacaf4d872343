"""The Strom broker: grpc.aio servicers over the storage engine, one module per RPC family.

Public front: :class:`~strom.broker.config.BrokerConfig` / :func:`~strom.broker.config.load_config`
(with :class:`~strom.broker.config.ConfigError`), :func:`~strom.broker.server.serve` and
:func:`~strom.broker.server.run`. Everything else is an internal part: ``core`` wires the state
owners (``cluster`` link to the controller quorum, ``metadata`` view of the image, ``publisher``
of image changes, ``topics`` lifecycle, ``metrics``; replicas live in ``strom.replication``),
``service`` routes RPCs to ``produce``, ``fetch``, ``offsets``, ``metadata_rpc`` and ``admin``, and
``health`` serves /metrics, /healthz and /readyz.

The front is imported lazily, so that the pure tables here (``config_keys``) can be imported, by
the operator for one, without loading the gRPC server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.broker.config import BrokerConfig, ConfigError, load_config
    from strom.broker.server import BrokerServer, run, serve

__all__ = ["BrokerConfig", "BrokerServer", "ConfigError", "load_config", "run", "serve"]

_HOME = {"BrokerConfig": "config", "ConfigError": "config", "load_config": "config",
         "BrokerServer": "server", "run": "server", "serve": "server"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'strom.broker' has no attribute {name!r}")
    return getattr(importlib.import_module(f"strom.broker.{_HOME[name]}"), name)
