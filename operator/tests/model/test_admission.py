"""The admission webhook's decisions (pure): each refusal names the field and the fix; cross-object
rules use the other objects the handler found; metadata-only updates always pass."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from strom_operator.model import admission, webhook_certs

CLUSTER = {"storage": {"size": "1Gi"}, "brokers": {"replicas": 1}}


def topic(rf: int = 1, cluster: str = "c", **extra: Any) -> dict[str, Any]:
    return {"clusterRef": {"name": cluster}, "partitions": 3, "replicationFactor": rf, **extra}


def cluster_obj(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "c"}, "spec": spec}


def test_a_topic_above_its_clusters_brokers_is_refused_naming_field_and_fix() -> None:
    verdict = admission.review_member("StromTopic", topic(rf=3), None, "ns", cluster_obj(CLUSTER))
    assert not verdict.allowed
    assert verdict.message == (
        "spec.replicationFactor: 3 is more than the 1 broker(s) of StromCluster c "
        "(spec.brokers.replicas); use at most 1, or scale the cluster first")
    assert admission.review_member("StromTopic", topic(rf=1), None, "ns",
                                   cluster_obj(CLUSTER)).allowed


@pytest.mark.parametrize("kind,spec", [
    ("StromTopic", topic()),
    ("StromConsumerGroup", {"clusterRef": {"name": "c"}, "topics": ["t"]}),
])
def test_a_member_naming_a_missing_cluster_is_refused_and_only_warned_on_dry_run(
        kind: str, spec: dict[str, Any]) -> None:
    verdict = admission.review_member(kind, spec, None, "team-a", None)
    assert verdict.message == (
        "spec.clusterRef.name: StromCluster c does not exist in namespace team-a; create the "
        "StromCluster first, or name an existing one")
    dry = admission.review_member(kind, spec, None, "team-a", None, dry_run=True)
    assert dry.allowed and "StromCluster c does not exist" in dry.warnings[0]


def test_an_unknown_topic_config_key_is_refused_with_the_closest_name() -> None:
    verdict = admission.review_member("StromTopic", topic(config={"retention.msx": "1000"}),
                                      None, "ns", cluster_obj(CLUSTER))
    assert not verdict.allowed
    assert verdict.message.startswith("spec.config")
    assert "did you mean retention.ms?" in verdict.message


def test_a_transition_rule_is_checked_on_update() -> None:
    verdict = admission.review_member("StromTopic", topic(), topic() | {"partitions": 6}, "ns",
                                      cluster_obj(CLUSTER))
    assert not verdict.allowed and "partitions" in verdict.message


def test_an_update_of_metadata_only_passes_even_if_the_spec_is_now_invalid() -> None:
    spec = topic(rf=3)  # valid when made; the cluster was scaled down through /scale since
    assert admission.review_member("StromTopic", spec, dict(spec), "ns",
                                   cluster_obj(CLUSTER)).allowed
    assert admission.review_cluster(CLUSTER, dict(CLUSTER),
                                    [{"metadata": {"name": "t"}, "spec": topic(rf=3)}]).allowed


def test_a_cluster_scaled_below_its_topics_replication_factor_is_refused() -> None:
    topics = [{"metadata": {"name": "orders"}, "spec": topic(rf=3)},
              {"metadata": {"name": "logs"}, "spec": topic(rf=1)}]
    three = {"storage": {"size": "1Gi"}, "brokers": {"replicas": 3}}
    verdict = admission.review_cluster(CLUSTER, three, topics)
    assert verdict.message == (
        "spec.brokers.replicas: 1 is fewer than the replicationFactor of StromTopic orders "
        "(RF 3); keep at least 3 brokers, or lower those topics' replicationFactor first")
    assert admission.review_cluster(three, CLUSTER, topics).allowed


def test_a_cluster_spec_error_is_refused_with_the_parsers_message() -> None:
    verdict = admission.review_cluster({"storage": {"size": "1Gi"},
                                        "config": {"num.partitionz": 3}}, None, [])
    assert not verdict.allowed and verdict.message.startswith("spec.config[num.partitionz]")


def test_the_serving_certificate_covers_the_service_and_is_renewed_near_its_end() -> None:
    names = webhook_certs.service_names("op-webhook", "strom-system")
    assert names[2] == "op-webhook.strom-system.svc"
    pair = webhook_certs.make(names)
    assert webhook_certs.still_good(pair, names)
    assert not webhook_certs.still_good(pair, webhook_certs.service_names("other", "ns"))
    later = datetime.datetime.now(datetime.UTC) + webhook_certs.VALID - datetime.timedelta(days=1)
    assert not webhook_certs.still_good(pair, names, now=later)
    other = webhook_certs.make(names)  # a pair whose certificate another CA signed
    assert not webhook_certs.still_good(
        webhook_certs.ServingPair(other.ca_pem, pair.cert_pem, pair.key_pem), names)
    assert not webhook_certs.still_good(webhook_certs.ServingPair(b"", b"", b""), names)


def test_the_handler_reads_kopfs_old_body_so_metadata_updates_pass() -> None:
    """kopf hands the stored object over as a ``kopf.Body`` (a Mapping, not a dict): read as
    "no old object", a finalizer removal after the cluster went away was refused (found on the
    real API server)."""
    import kopf

    from strom_operator.handlers.admission import decide

    class NoCluster:
        def get(self, *_: Any) -> None:
            return None

        def list(self, *_: Any) -> list[dict[str, Any]]:
            return []

    stored = {"metadata": {"name": "orders"}, "spec": topic()}
    verdict = decide(NoCluster(), "StromTopic", "orders", topic(), kopf.Body(stored),  # type: ignore[arg-type]
                     "ns", False)
    assert verdict.allowed
    assert not decide(NoCluster(), "StromTopic", "orders", topic(), None, "ns",  # type: ignore[arg-type]
                      False).allowed
