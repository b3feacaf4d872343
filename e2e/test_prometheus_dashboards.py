"""Every panel of the chart's broker dashboards shows data on a busy cluster, through a real
Prometheus.

Three broker processes on 127.0.0.1 carry gRPC and Kafka-protocol produce traffic, a consumer
group that commits, and a partition reassignment; Debian's ``prometheus`` scrapes their
``/metrics`` every second, with the labels Kubernetes service discovery gives pods (namespace,
pod, container: the chart's documented scrape config sets them the same way). Then each
dashboard's template variables are checked to offer the values the test uses, and each panel
query, with those values filled in, is evaluated through Prometheus' HTTP API: an empty result
fails the test, naming the dashboard, panel and query. The operator's dashboard reads only the
operator's metrics and is evaluated on Kubernetes, where the operator runs.

The same scrape also checks ``strom.broker.metrics.EXPORTED``, the list the chart's alerts and
dashboards are checked against, both ways: every listed name is scraped, and every scraped
``strom_*`` name is listed.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer as KafkaProducer

from strom.broker.metrics import EXPORTED
from strom.client import Consumer, Producer
from strom.testing import Cluster, running_cluster
from strom.testing.dashboards import panel_count, panel_queries, variable_queries
from strom.testing.prometheus import PrometheusApi, prometheus_binary, running_prometheus
from strom.testing.tools import missing

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[1]
DASHBOARDS = REPO / "charts" / "strom" / "files" / "grafana-dashboards"
OPERATOR_ONLY = {"operator.json"}
NAMESPACE, TOPIC, GROUP = "strom-test", "events", "orders"
TRAFFIC_S = 40.0


def _need_prometheus() -> str:
    binary = prometheus_binary()
    if binary is None:
        missing("the prometheus binary is missing (Debian package prometheus)")
    return binary


def scrape_config(cluster: Cluster) -> str:
    """One static target per broker, labelled as kubernetes_sd + the documented relabelling
    would label a broker pod."""
    targets = "\n".join(
        f"      - targets: ['{b.host}:{b.metrics_port}']\n"
        f"        labels: {{namespace: {NAMESPACE}, pod: c-broker-{b.broker_id}, "
        f"container: broker}}"
        for b in cluster.brokers.values())
    return ("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: strom-brokers\n    static_configs:\n"
            f"{targets}\n")


class Traffic:
    """gRPC and Kafka-protocol producers and a committing consumer group, in threads, bounded
    by ``TRAFFIC_S``; ``stop()`` ends them and re-raises the first error."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self.produced = self.consumed = 0
        self.threads = [threading.Thread(target=self._guard, args=(fn,), daemon=True)
                        for fn in (self._grpc, self._kafka, self._consume)]

    def start(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(30)
        if self.errors:
            raise self.errors[0]

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as err:  # handed to the test thread by stop()
            self.errors.append(err)

    def _running(self, started: float) -> bool:
        return not self.stopping.is_set() and time.monotonic() - started < TRAFFIC_S

    def _grpc(self) -> None:
        started = time.monotonic()
        with Producer(self.cluster.bootstrap, acks="all") as producer:
            while self._running(started):
                for i in range(200):
                    producer.send(TOPIC, b"grpc-%d" % i, key=b"%d" % (i % 12))
                producer.flush(30)
                self.produced += 200
                time.sleep(0.05)

    def _kafka(self) -> None:
        started = time.monotonic()
        producer = KafkaProducer({"bootstrap.servers": self.cluster.kafka_bootstrap,
                                  "acks": "all", "linger.ms": 5})
        while self._running(started):
            for i in range(50):
                producer.produce(TOPIC, b"kafka-%d" % i)
            producer.flush(30)
            time.sleep(0.1)
        producer.flush(30)

    def _consume(self) -> None:
        started = time.monotonic()
        with Consumer(self.cluster.bootstrap, group_id=GROUP,
                      auto_offset_reset="earliest") as consumer:
            consumer.subscribe([TOPIC])
            while self._running(started):
                self.consumed += len(consumer.poll(timeout_ms=300))
                consumer.commit()


def _reassign_one_partition(cluster: Cluster) -> None:
    """Move ``events-0`` onto the broker that does not host it (with a throttle), and wait."""
    current = list(cluster.partition(TOPIC, 0).replicas)
    spare = next(b for b in cluster.brokers if b not in current)
    with cluster.admin() as admin:
        admin.alter_partition_reassignments({(TOPIC, 0): [spare, current[0]]},
                                            throttle_bytes_per_sec=10 * 1024 * 1024)
    cluster.wait_reassignments_done([TOPIC], timeout=60)
    assert sorted(cluster.partition(TOPIC, 0).replicas) == sorted([spare, current[0]])


def _check_variables(prom: PrometheusApi, path: Path, values: dict[str, str]) -> None:
    for var in variable_queries(path, values):
        offered = prom.wait_for(
            f"{path.name}: ${var.name} offers {values[var.name]!r}",
            lambda var=var: values[var.name] in prom.label_values(var.label, var.match) or None,
            timeout=30)
        assert offered


def test_every_broker_dashboard_panel_has_data(tmp_path: Path) -> None:
    binary = _need_prometheus()
    values = {"namespace": NAMESPACE, "topic": TOPIC, "group": GROUP}
    paths = sorted(DASHBOARDS.glob("*.json"))
    assert {p.name for p in paths} >= OPERATOR_ONLY | {"cluster-overview.json"}
    with running_cluster(tmp_path / "cluster", brokers=3) as cluster:
        with cluster.admin() as admin:
            admin.create_topic(TOPIC, partitions=6, replication_factor=2)
        for p in range(6):
            cluster.wait_for_isr(TOPIC, p, 2, timeout=30)
        with running_prometheus(tmp_path / "prometheus", scrape_config(cluster),
                                binary=binary) as prom:
            traffic = Traffic(cluster).start()
            try:
                _reassign_one_partition(cluster)
                prom.wait_for("the group's committed offsets in Prometheus", lambda: prom.query(
                    f'strom_consumer_group_committed_offset{{group="{GROUP}"}}'), timeout=60)
                # rate() windows need a few scrapes after the reassignment: each panel's query
                # below is polled until it has data (bounded), not given a fixed head start
                checked = empty = 0
                failures: list[str] = []
                for path in paths:
                    if path.name in OPERATOR_ONLY:
                        continue
                    _check_variables(prom, path, values)
                    for query in panel_queries(path, values):
                        checked += 1
                        try:
                            prom.wait_for(str(query), lambda q=query: prom.query(q.expr),
                                          timeout=15, interval=1.0)
                        except AssertionError:
                            empty += 1
                            failures.append(str(query))
                panels = sum(panel_count(p) for p in paths if p.name not in OPERATOR_ONLY)
                print(f"{checked} queries of {panels} panels evaluated, {empty} empty; "
                      f"produced {traffic.produced} (gRPC) records, consumed {traffic.consumed}")
                assert not failures, "empty panels:\n" + "\n".join(failures)
                _check_exported(prom)
            finally:
                traffic.stop()
            _check_values(cluster, prom)
    assert traffic.consumed > 0 and traffic.produced > 0


def _scalar(prom: PrometheusApi, expr: str) -> float:
    result = prom.query(expr)
    assert len(result) == 1, (expr, result)
    return float(result[0]["value"][1])


def _check_values(cluster: Cluster, prom: PrometheusApi) -> None:
    """The numbers agree with the cluster: one active controller, every broker agreeing on the
    quorum leader, the controller's counts, and the dashboards' lag join equal to the lag the
    Admin API computes once traffic has stopped."""
    assert _scalar(prom, "sum(strom_controller_active)") == 1
    leaders = {r["value"][1] for r in prom.query("strom_raft_current_leader")}
    assert leaders == {str(cluster.controller_id())}, leaders
    assert _scalar(prom, 'max(strom_controller_brokers{state="active"})') == 3
    with cluster.admin() as admin:
        partitions = sum(len(t.partitions) for t in admin.describe_topics(None))
        expected = sum(p.lag or 0 for p in admin.group_lag(GROUP) if p.topic == TOPIC)
    assert _scalar(prom, "max(strom_controller_partitions)") >= partitions >= 6
    lag = (f'sum(clamp_min(max by (namespace, topic, partition) (strom_log_high_watermark) '
           f'- on (namespace, topic, partition) group_right max by (namespace, group, topic, '
           f'partition) (strom_consumer_group_committed_offset{{group="{GROUP}"}}), 0))')
    prom.wait_for(f"lag from broker metrics == Admin.group_lag ({expected})",
                  lambda: _scalar(prom, lag) == expected or None, timeout=30)


def _check_exported(prom: PrometheusApi) -> None:
    scraped = {n for n in prom.metric_names()
               if n.startswith("strom_") and not n.endswith("_created")}
    assert not EXPORTED - scraped, f"listed in EXPORTED, not scraped: {sorted(EXPORTED - scraped)}"
    assert not scraped - EXPORTED, f"scraped, not in EXPORTED: {sorted(scraped - EXPORTED)}"


def test_operator_dashboard_reads_only_operator_metrics() -> None:
    """Why the test above may leave it out: no broker metric in the operator's dashboard."""
    names = set()
    for query in panel_queries(DASHBOARDS / "operator.json", {"namespace": "x"}):
        names |= set(re.findall(r"\bstrom_[a-z_]+", query.expr))
    assert names and all(n.startswith("strom_operator_") for n in names), names
