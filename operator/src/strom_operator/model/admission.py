"""What the admission webhook decides for a StromCluster, StromTopic or StromConsumerGroup.

The CRD schemas and their CEL rules already refuse wrong types, out-of-range values and changes
to immutable fields inside one object. What they cannot see is checked here, before the object is
stored, with the message a user reads in ``kubectl apply``:

* everything :func:`~strom_operator.model.specs.parse_cluster` / ``parse_topic`` /
  ``parse_consumer_group`` find (e.g. an unknown key in ``spec.config``, which an open map in a
  schema cannot refuse) and the transition rules on an update (:func:`check_transition`);
* other objects: a topic or group whose ``spec.clusterRef`` names no StromCluster in its
  namespace, a topic whose ``replicationFactor`` is above its cluster's ``spec.brokers.replicas``,
  and a cluster whose ``spec.brokers.replicas`` would drop below a replication factor of one of
  its topics.

Pure functions over plain dicts (the webhook handler looks the other objects up). An update that
leaves ``spec`` as it was (metadata only: finalizers, labels) is always allowed, so an object that
became invalid through another one (a cluster scaled through its ``/scale`` subresource) can still
be labelled and deleted. A server-side dry run cannot see objects created earlier in the same
dry run, so there a missing cluster is a warning, not a refusal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from strom_operator.model.errors import FieldError, SpecError
from strom_operator.model.specs import (
    check_transition,
    parse_cluster,
    parse_consumer_group,
    parse_topic,
)

PARSERS: dict[str, Callable[[Any], Any]] = {
    "StromCluster": parse_cluster,
    "StromTopic": parse_topic,
    "StromConsumerGroup": parse_consumer_group,
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Refusals (any one refuses the request) and warnings (shown by kubectl, allowed)."""

    errors: tuple[FieldError, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.errors

    @property
    def message(self) -> str:
        return "; ".join(str(e) for e in self.errors)


def spec_changed(spec: Any, old_spec: Any) -> bool:
    return old_spec is None or dict(spec or {}) != dict(old_spec or {})


def own_errors(kind: str, spec: Any, old_spec: Any) -> tuple[Any, list[FieldError]]:
    """The object alone: parse errors, then (on update) the transition rules."""
    parse = PARSERS[kind]
    try:
        parsed = parse(spec)
    except SpecError as err:
        return None, list(err.errors)
    if old_spec is not None:
        try:
            old = parse(old_spec)
        except SpecError:
            return parsed, []  # the old spec was already bad: judge the new one alone
        return parsed, check_transition(parsed, old)
    return parsed, []


def _replicas(cluster: Mapping[str, Any]) -> int | None:
    try:
        return parse_cluster(cluster.get("spec")).brokers.replicas
    except SpecError:
        return None


def review_cluster(spec: Any, old_spec: Any, topics: Sequence[Mapping[str, Any]]) -> Verdict:
    """``topics``: the StromTopics of the cluster's namespace that name it."""
    if not spec_changed(spec, old_spec):
        return Verdict()
    parsed, errors = own_errors("StromCluster", spec, old_spec)
    if parsed is not None:
        replicas = parsed.brokers.replicas
        above = sorted(
            ((int((t.get("spec") or {}).get("replicationFactor") or 0),
              str(t.get("metadata", {}).get("name"))) for t in topics),
            reverse=True,
        )
        if above and above[0][0] > replicas:
            names = ", ".join(f"{name} (RF {rf})" for rf, name in above if rf > replicas)
            errors.append(FieldError(
                "spec.brokers.replicas",
                f"{replicas} is fewer than the replicationFactor of StromTopic {names}; keep at "
                f"least {above[0][0]} brokers, or lower those topics' replicationFactor first"))
    return Verdict(tuple(errors))


def review_member(kind: str, spec: Any, old_spec: Any, namespace: str,
                  cluster: Mapping[str, Any] | None, *, dry_run: bool = False) -> Verdict:
    """A StromTopic or StromConsumerGroup; ``cluster`` is the StromCluster its ``clusterRef``
    names, ``None`` if there is none in ``namespace``."""
    if not spec_changed(spec, old_spec):
        return Verdict()
    parsed, errors = own_errors(kind, spec, old_spec)
    warnings: list[str] = []
    if parsed is None:
        return Verdict(tuple(errors))
    name = parsed.cluster_ref.name
    if cluster is None:
        missing = (f"StromCluster {name} does not exist in namespace {namespace}; create the "
                   "StromCluster first, or name an existing one")
        if dry_run:
            warnings.append(f"spec.clusterRef.name: {missing} (a real apply is refused)")
        else:
            errors.append(FieldError("spec.clusterRef.name", missing))
    elif kind == "StromTopic":
        replicas = _replicas(cluster)
        rf = parsed.replication_factor
        if replicas is not None and rf > replicas:
            errors.append(FieldError(
                "spec.replicationFactor",
                f"{rf} is more than the {replicas} broker(s) of StromCluster {name} "
                f"(spec.brokers.replicas); use at most {replicas}, or scale the cluster first"))
    return Verdict(tuple(errors), tuple(warnings))
