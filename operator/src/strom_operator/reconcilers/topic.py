"""Reconcile a StromTopic with its topic in the cluster.

Create it; grow partitions; set/revert configs incrementally; change the replication factor by a
reassignment (rack-aware, on the least-loaded brokers; ``Ready=False, reason=Reassigning`` until
the cluster reports it done).  What :func:`strom_operator.model.topics.diff` refuses (fewer
partitions than the topic has, a replication factor above the broker count) is written as
``Ready=False`` with the reason and not retried until something changes.  Deleting the resource
deletes the topic only with ``deletionPolicy: Delete`` (the finalizer keeps the resource until
then); with ``Retain`` the topic stays.
"""

from __future__ import annotations

from typing import Any

from strom_operator.model import conditions, topics
from strom_operator.model.errors import SpecError
from strom_operator.model.specs import API_VERSION, StromTopicSpec, parse_cluster, parse_topic
from strom_operator.reconcilers.admin import AdminError, TopicAdmin
from strom_operator.reconcilers.cluster import Event, Outcome, ReconcileError, ref_of
from strom_operator.reconcilers.kube import KubeApi
from strom_operator.reconcilers.validation import check

KIND = "StromTopic"


def _rejection_reason(message: str) -> str:
    if "only grow" in message:
        return "PartitionsCannotShrink"
    if "broker" in message:
        return "NotEnoughBrokers"
    return "Rejected"


class TopicReconciler:
    def __init__(self, api: KubeApi, admin: TopicAdmin) -> None:
        self.api = api
        self.admin = admin

    def reconcile(self, body: dict[str, Any], old_spec: dict[str, Any] | None = None) -> Outcome:
        checked = check(self.api, KIND, body, old_spec)
        res, cref, cspec = checked.resource, checked.cluster_ref, checked.cluster_spec
        spec: StromTopicSpec = checked.spec
        name = topics.topic_name(spec, res.name)
        events: list[Event] = []
        try:
            view = self.admin.topic(cref, cspec, name)
            if view.moving:
                res.condition(
                    conditions.READY, "False", "Reassigning", f"topic {name} is being reassigned"
                )
                status = res.write(topics.status_of(view.live))
                return Outcome(status, events, True)
            changes = topics.diff(spec, name, view.live, view.racks, view.loads)
            if changes.rejected:
                reason = _rejection_reason(changes.rejected)
                res.condition(conditions.READY, "False", reason, changes.rejected)
                events.append(Event("Warning", reason, changes.rejected))
                status = res.write(topics.status_of(view.live))
                return Outcome(status, events, False)
            done: list[str] = []
            if changes.create:
                self.admin.create_topic(
                    cref,
                    cspec,
                    name,
                    spec.partitions,
                    spec.replication_factor,
                    changes.set_config,
                )
                done.append(
                    f"created with {spec.partitions} partition(s), "
                    f"replication factor {spec.replication_factor}"
                )
            else:
                if changes.grow_to:
                    self.admin.grow_partitions(cref, cspec, name, changes.grow_to)
                    done.append(f"grew to {changes.grow_to} partitions")
                if changes.set_config or changes.delete_config:
                    self.admin.alter_config(
                        cref, cspec, name, changes.set_config, changes.delete_config
                    )
                    keys = sorted([*changes.set_config, *changes.delete_config])
                    done.append(f"config {', '.join(keys)} applied")
                if changes.reassign:
                    targets = {(name, p): r for p, r in changes.reassign.items()}
                    # 0: keep whatever replication throttle the cluster has.
                    self.admin.reassign(cref, cspec, targets, 0)
                    done.append(
                        f"reassigning {len(targets)} partition(s) to replication factor "
                        f"{spec.replication_factor}"
                    )
            if done:
                events.append(Event("Normal", "TopicUpdated", f"topic {name}: " + "; ".join(done)))
                view = self.admin.topic(cref, cspec, name)
        except AdminError as err:
            res.fail("topic", "AdminApiError", str(err))
        if changes.reassign or view.moving:
            res.condition(
                conditions.READY,
                "False",
                "Reassigning",
                f"changing the replication factor of {name} to {spec.replication_factor}",
            )
            requeue = True
        else:
            res.condition(conditions.READY, "True", "Applied", f"topic {name} matches the spec")
            requeue = False
        status = res.write(topics.status_of(view.live))
        return Outcome(status, events, requeue)

    def delete(self, body: dict[str, Any]) -> list[Event]:
        """Before the finalizer goes: delete the topic if the policy says so."""
        meta = body.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        try:
            spec = parse_topic(body.get("spec"))
        except SpecError:
            return []  # never applied: nothing to delete
        name = topics.topic_name(spec, meta["name"])
        cluster = self.api.get(API_VERSION, "StromCluster", namespace, spec.cluster_ref.name)
        step = topics.deletion_step(spec.deletion_policy, cluster is not None)
        if step == "Release" or cluster is None:
            return [Event("Normal", "TopicRetained", f"topic {name} left in the cluster")]
        try:
            self.admin.delete_topic(ref_of(cluster), parse_cluster(cluster.get("spec")), name)
        except (AdminError, SpecError) as err:
            raise ReconcileError("delete", "AdminApiError", str(err)) from err
        return [Event("Normal", "TopicDeleted", f"topic {name} deleted (deletionPolicy Delete)")]
