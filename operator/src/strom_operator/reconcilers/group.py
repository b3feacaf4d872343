"""Reconcile a StromConsumerGroup: status with members and lag, offset resets, lag autoscaling.

Each reconcile (on change and on the periodic timer) reads the group and its lag, applies a
changed ``spec.resetOffsets`` once while the group is empty (``OffsetsReset`` condition; waits
with a message while members are connected), and, with ``spec.autoscale``, sets the target
workload's replicas through its ``scale`` subresource as
:func:`strom_operator.model.autoscale.decide` says (capped at the partition count, scale-down
after the cooldown).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from strom_operator.model import autoscale, conditions, groups
from strom_operator.model.specs import StromConsumerGroupSpec
from strom_operator.reconcilers.admin import AdminError, GroupAdmin
from strom_operator.reconcilers.cluster import Event, Outcome
from strom_operator.reconcilers.kube import ApiError, KubeApi
from strom_operator.reconcilers.validation import Checked, Resource, check

KIND = "StromConsumerGroup"


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(tz=datetime.UTC)


class GroupReconciler:
    def __init__(
        self,
        api: KubeApi,
        admin: GroupAdmin,
        now: Callable[[], datetime.datetime] = _utcnow,
    ) -> None:
        self.api = api
        self.admin = admin
        self.now = now

    def reconcile(self, body: dict[str, Any], old_spec: dict[str, Any] | None = None) -> Outcome:
        checked = check(self.api, KIND, body, old_spec)
        res = checked.resource
        spec: StromConsumerGroupSpec = checked.spec
        group_id = spec.group_id or res.name
        previous = res.status
        events: list[Event] = []
        requeue = False
        fields: dict[str, Any] = {}
        try:
            view = self.admin.group(
                checked.cluster_ref, checked.cluster_spec, group_id, spec.topics
            )
            decision = groups.reset_decision(
                spec.reset_offsets, previous.get("appliedResetHash"), view
            )
            if decision.step == "Apply":
                assert spec.reset_offsets is not None
                self.admin.reset_offsets(
                    checked.cluster_ref,
                    checked.cluster_spec,
                    group_id,
                    groups.reset_topics(spec.reset_offsets, spec.topics),
                    groups.reset_target(spec.reset_offsets),
                )
                fields["appliedResetHash"] = decision.hash
                if res.generation is not None:
                    fields["appliedResetGeneration"] = res.generation
                done = decision.message.replace("resetting", "reset")
                res.condition(conditions.OFFSETS_RESET, "True", "Applied", done)
                events.append(Event("Normal", "OffsetsReset", f"group {group_id}: {done}"))
                view = self.admin.group(
                    checked.cluster_ref, checked.cluster_spec, group_id, spec.topics
                )
            elif decision.step == "WaitForEmptyGroup":
                res.condition(
                    conditions.OFFSETS_RESET, "False", "WaitingForEmptyGroup", decision.message
                )
                requeue = True
            elif decision.step == "Done":
                res.condition(conditions.OFFSETS_RESET, "True", "Applied", decision.message)
        except AdminError as err:
            res.fail("group", "AdminApiError", str(err))
        fields.update(groups.lag_status(view, spec.topics))
        if spec.autoscale is not None:
            fields["autoscale"] = self._autoscale(checked, res, view, fields["totalLag"], events)
        res.condition(
            conditions.READY,
            "True",
            "Observed",
            f"group {group_id}: {fields['members']} member(s), lag {fields['totalLag']}",
        )
        status = res.write(fields)
        return Outcome(status, events, requeue)

    def _autoscale(
        self,
        checked: Checked,
        res: Resource,
        view: groups.GroupView,
        total_lag: int,
        events: list[Event],
    ) -> dict[str, Any]:
        spec = checked.spec.autoscale
        target = spec.target
        previous = dict(res.status.get("autoscale") or {})
        workload = self.api.get("apps/v1", target.kind, res.namespace, target.name)
        if workload is None:
            message = f"{target.kind} {target.name} not found in namespace {res.namespace}"
            res.condition(conditions.AUTOSCALING, "False", "TargetNotFound", message)
            return {**previous, "message": message}
        current = int((workload.get("spec") or {}).get("replicas", 1) or 0)
        now = self.now()
        choice = autoscale.decide(
            spec,
            total_lag=total_lag,
            partitions=view.partitions,
            current=current,
            seconds_since_last_scale=groups.seconds_since(previous.get("lastScaleTime"), now),
        )
        out: dict[str, Any] = {"replicas": choice.replicas, "message": choice.reason}
        if previous.get("lastScaleTime"):
            out["lastScaleTime"] = previous["lastScaleTime"]
        if choice.changed:
            try:
                self.api.scale("apps/v1", target.kind, res.namespace, target.name, choice.replicas)
            except ApiError as err:
                message = f"scaling {target.kind} {target.name} failed: {err}"
                res.condition(conditions.AUTOSCALING, "False", "ScaleFailed", message)
                return {**out, "replicas": current, "message": message}
            out["lastScaleTime"] = conditions.now_rfc3339(now)
            reason = "ScaledUp" if choice.replicas > current else "ScaledDown"
            events.append(Event("Normal", reason, f"{target.kind} {target.name}: {choice.reason}"))
            res.condition(conditions.AUTOSCALING, "True", reason, choice.reason)
        else:
            res.condition(conditions.AUTOSCALING, "True", "Steady", choice.reason)
        return out
