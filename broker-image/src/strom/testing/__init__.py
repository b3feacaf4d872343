"""Real broker processes and clusters for tests of every package (broker, client, CLI, operator,
Spark, benchmarks).

One broker: :func:`running_broker` / :class:`BrokerProcess` (see :mod:`strom.testing.broker`).
A cluster of brokers in combined mode (each voter runs a controller): :func:`running_cluster` /
:class:`Cluster` (see :mod:`strom.testing.cluster`). Everything runs on 127.0.0.1 with free
ports, in a directory of the test's choosing, and every process is stopped at exit. pytest is
imported only by :func:`broker_fixture`, so this package has no test-only dependencies.
"""

from __future__ import annotations

from strom.testing.broker import (
    BrokerHandle,
    BrokerProcess,
    BrokerStartError,
    broker_fixture,
    config_from_kwargs,
    config_value,
    free_port,
    free_ports,
    running_broker,
)
from strom.testing.cluster import (
    CLUSTER_TEST_DEFAULTS,
    Cluster,
    ClusterTimeout,
    running_cluster,
    voters_string,
)

__all__ = [
    "CLUSTER_TEST_DEFAULTS",
    "BrokerHandle",
    "BrokerProcess",
    "BrokerStartError",
    "Cluster",
    "ClusterTimeout",
    "broker_fixture",
    "config_from_kwargs",
    "config_value",
    "free_port",
    "free_ports",
    "running_broker",
    "running_cluster",
    "voters_string",
]
