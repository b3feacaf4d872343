"""The Strom broker: grpc.aio servicers over the storage engine, one module per RPC family.

Public front: :class:`~strom.broker.config.BrokerConfig` / :func:`~strom.broker.config.load_config`
(with :class:`~strom.broker.config.ConfigError`), :func:`~strom.broker.server.serve` and
:func:`~strom.broker.server.run`. Everything else is an internal part: ``core`` wires the state
owners (``cluster`` link to the controller quorum, ``metadata`` view of the image, ``publisher``
of image changes, ``topics`` lifecycle, ``metrics``; replicas live in ``strom.replication``),
``service`` routes RPCs to ``produce``, ``fetch``, ``offsets``, ``metadata_rpc`` and ``admin``, and
``health`` serves /metrics, /healthz and /readyz.
"""

from strom.broker.config import BrokerConfig, ConfigError, load_config
from strom.broker.server import BrokerServer, run, serve

__all__ = ["BrokerConfig", "BrokerServer", "ConfigError", "load_config", "run", "serve"]
