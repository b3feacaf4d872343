"""The failover comparison beside Kafka (``benchmarks/kafka_failover.py``) kills what its rows
say it kills: with fault ``kill-controller`` the node killed leads the partition *and* is the
active controller at the kill, even when the partition's leader starts elsewhere.

The Strom side runs here (a 3-broker cluster at test timeouts, seconds). The Kafka side runs in
the benchmark smoke (``test_benchmark_smoke.py`` asserts the same of Kafka's rows: the victim
was the controller named by Kafka's ``MetadataQuorumCommand`` just before the kill, and another
node was the controller after it), which already pays for a 3-node Kafka; a second one here
would add a minute of CI for the same check.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from strom.testing import running_cluster

# benchmarks/ is the repository's directory, not an installed package (``python -m benchmarks``
# runs from the root); appended, so it shadows nothing.
ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.append(ROOT)

from benchmarks import kafka_failover as kf  # noqa: E402

# What Kafka 4.x's MetadataQuorumCommand prints for ``describe --status`` (its
# handleDescribeStatus: one "Name:<spaces>value" line each).
QUORUM_STATUS = """\
ClusterId:              q1Sh-9_ISia_zwGINzRvyQ
LeaderId:               2
LeaderEpoch:            7
HighWatermark:          1204
MaxFollowerLag:         0
MaxFollowerLagTimeMs:   0
CurrentVoters:          [{"id": 0, "endpoints": ["CONTROLLER://127.0.0.1:40001"]}, {"id": 2}]
CurrentObservers:       []
"""


def test_the_active_controller_is_the_leader_id_of_the_quorum_status() -> None:
    assert kf.parse_quorum_leader(QUORUM_STATUS) == 2
    assert kf.parse_quorum_leader(QUORUM_STATUS.replace("LeaderId:               2",
                                                        "LeaderId:               -1")) == -1
    with pytest.raises(ValueError, match="no LeaderId line"):
        kf.parse_quorum_leader("org.apache.kafka.common.errors.TimeoutException: Timed out")


@dataclass
class Witness:
    """A Strom target that notes, at each kill, the partition's leader and the active
    controller as the cluster names them over gRPC (Metadata, DescribeCluster): not what the
    benchmark computed through the Kafka listener."""

    inner: kf.StromTarget
    name: str = "strom"
    seen: list[tuple[int, int, int]] = field(default_factory=list)
    """(node killed, leader, active controller) just before each kill."""

    def addresses(self) -> dict[int, str]:
        return self.inner.addresses()

    def controller(self) -> int:
        return self.inner.controller()

    def kill(self, node: int) -> None:
        cluster = self.inner.cluster  # the leader as the node itself knows it (no lag)
        self.seen.append((node, cluster.leader_of(kf.TOPIC, 0, via=node),
                          cluster.controller_id()))
        self.inner.kill(node)

    def restart(self, node: int) -> None:
        self.inner.restart(node)


@pytest.mark.integration
@pytest.mark.slow
def test_kill_controller_kills_a_leader_that_is_the_active_controller(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=3) as cluster:
        target = Witness(kf.StromTarget(cluster))
        kf.create_topic(cluster.kafka_bootstrap)
        kf.wait_whole(target)
        # start from the wrong place: the partition led by a node that is not the controller
        controller = cluster.controller_id()
        elsewhere = next(b for b in sorted(cluster.brokers) if b != controller)
        kf.lead_from(target, elsewhere)
        cluster.wait_until(lambda: cluster.leader_of(kf.TOPIC, 0, via=elsewhere) == elsewhere,
                           timeout=30, what=f"broker {elsewhere} to lead {kf.TOPIC}-0")
        assert cluster.controller_id() != elsewhere
        runs, acked, lost = kf.measure(target, 1, lambda _: None, "kill-controller")
    [run] = runs
    [(victim, leader, controller_at_kill)] = target.seen
    assert victim == leader == controller_at_kill, target.seen
    assert run.victim == victim and run.victim_was_controller, run
    assert run.controller_after not in (-1, victim), run
    assert acked > 0 and lost == 0
