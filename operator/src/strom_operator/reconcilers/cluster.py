"""Reconcile a StromCluster: an ordered list of named steps, Strimzi style.

Steps (each a method ``_step_<name>``; they run in this order and share a :class:`Context`):

1. ``validate``   parse the spec (every problem named with its field and fix) and the transition
                  rules against the last applied spec; an invalid spec stops here with
                  ``Ready=False, reason=InvalidSpec`` and is not retried until the spec changes.
2. ``scaling``    decide the StatefulSet's replica count (:mod:`strom_operator.model.scaling`):
                  scale-out at once; scale-in only after the leaving brokers are drained, refused
                  when the rest can not hold the replication factor.
3. ``storage``    grow existing PVCs when ``spec.storage.size`` grew; refuse shrinking.
4. ``apply``      server-side apply every desired object (ConfigMap, Services, StatefulSet, PDB,
                  ServiceMonitor, NetworkPolicy, ...); idempotent.
5. ``roll``       restart at most one stale broker pod (:mod:`strom_operator.model.rolling`).
6. ``status``     write conditions (with observedGeneration), broker counts, bootstrap address,
                  the scale subresource's selector, and what the Kubernetes cluster lacks that
                  the spec names (:mod:`strom_operator.model.environment`: ServiceMonitor CRD,
                  zone labels, an enforcing network plugin), one condition each; those never
                  stop the reconcile.

What the cluster itself knows (registered brokers, replica placement, under-replicated partitions,
the active controller, reassignments in flight) comes from a :class:`ClusterAdmin`
(:class:`~strom_operator.reconcilers.admin.AdminClusterAdmin` in the operator).  When it answers
"unknown" (unreachable cluster, or :class:`NoAdmin` in tests) the steps act on Kubernetes state
alone: scale-in then waits (never removes a broker that may hold data) and rolls are paced by pod
readiness; ``AdminApiAvailable=False`` says why.

Moving partitions (scale-out rebalance, scale-in drain) is one reassignment through the Admin API
with a replication throttle; ``Rebalancing=True`` with ``status.rebalance`` (moves, partitions
still moving, percent) while it runs, then ``False``/``Done``, the throttle removed and preferred
leaders elected again.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

from strom_operator.model import (
    conditions,
    environment,
    manifests,
    rolling,
    scaling,
    storage,
    topics,
)
from strom_operator.model.cluster_state import ClusterState
from strom_operator.model.conditions import Status
from strom_operator.model.errors import PlanError, SpecError
from strom_operator.model.manifests import ClusterRef, Names, OperatorIdentity
from strom_operator.model.specs import (
    API_VERSION,
    StromClusterSpec,
    check_transition,
    parse_cluster,
)
from strom_operator.reconcilers.admin import (
    AdminError,
    ClusterAdmin,
    NoAdmin,
    throttle_from_env,
)
from strom_operator.reconcilers.kube import ApiError, KubeApi
from strom_operator.reconcilers.probes import PortProbe

__all__ = [
    "AdminError",
    "ClusterAdmin",
    "ClusterReconciler",
    "ClusterState",
    "Context",
    "Event",
    "NoAdmin",
    "Outcome",
    "ReconcileError",
    "cleanup",
    "ref_of",
]


@dataclasses.dataclass(frozen=True)
class Event:
    type: str  # "Normal" | "Warning"
    reason: str
    message: str


class ReconcileError(Exception):
    """A step failed. ``permanent``: do not retry until the spec changes."""

    def __init__(self, step: str, reason: str, message: str, *, permanent: bool = False) -> None:
        self.step = step
        self.reason = reason
        self.permanent = permanent
        super().__init__(f"{step}: {message}")


@dataclasses.dataclass
class Context:
    body: dict[str, Any]
    ref: ClusterRef
    old_spec: dict[str, Any] | None = None
    spec: StromClusterSpec | None = None
    state: ClusterState | None = None
    statefulset_replicas: int | None = None
    live_statefulset: dict[str, Any] | None = None
    conditions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    status: dict[str, Any] = dataclasses.field(default_factory=dict)
    events: list[Event] = dataclasses.field(default_factory=list)
    requeue: bool = False  # more work to do later (waiting for pods, drains, ...)

    def condition(self, type: str, status: Status, reason: str, message: str) -> None:
        self.conditions = conditions.set_condition(
            self.conditions,
            type,
            status,
            reason,
            message,
            observed_generation=self.ref.generation,
        )


@dataclasses.dataclass(frozen=True)
class Outcome:
    status: dict[str, Any]
    events: list[Event]
    requeue: bool


def ref_of(body: dict[str, Any]) -> ClusterRef:
    meta = body.get("metadata", {})
    return ClusterRef(
        name=meta["name"],
        namespace=meta.get("namespace") or "default",
        uid=meta.get("uid") or "",
        generation=meta.get("generation"),
    )


class ClusterReconciler:
    """Runs the steps for one StromCluster; construct per reconcile (it is cheap)."""

    STEPS = ("validate", "scaling", "storage", "apply", "roll", "status")

    def __init__(
        self,
        api: KubeApi,
        admin: ClusterAdmin | None = None,
        *,
        throttle_bytes_per_sec: int | None = None,
        operator: OperatorIdentity | None = None,
        probe: PortProbe | None = None,
    ) -> None:
        self.api = api
        self.admin: ClusterAdmin = admin or NoAdmin()
        self.operator = operator
        self.probe = probe
        self.throttle = (
            throttle_from_env() if throttle_bytes_per_sec is None else throttle_bytes_per_sec
        )

    def reconcile(self, body: dict[str, Any], old_spec: dict[str, Any] | None = None) -> Outcome:
        """Run every step; ``old_spec`` is the previously handled spec (kopf's ``old``), if any."""
        ctx = Context(body=body, ref=ref_of(body), old_spec=old_spec)
        ctx.conditions = list((body.get("status") or {}).get("conditions") or [])
        for name in self.STEPS:
            step: Callable[[Context], None] = getattr(self, f"_step_{name}")
            try:
                step(ctx)
            except ReconcileError as err:
                self._fail(ctx, err)
                raise
            except ApiError as err:
                failure = ReconcileError(name, "ApiError", str(err))
                self._fail(ctx, failure)
                raise failure from err
        return Outcome(ctx.status, ctx.events, ctx.requeue)

    # -- helpers ----------------------------------------------------------------------------

    def _write_status(self, ctx: Context) -> None:
        status = {**ctx.status, "conditions": ctx.conditions}
        if ctx.ref.generation is not None:
            status["observedGeneration"] = ctx.ref.generation
        self.api.patch_status(API_VERSION, "StromCluster", ctx.ref.namespace, ctx.ref.name, status)
        ctx.status = status

    def _fail(self, ctx: Context, err: ReconcileError) -> None:
        message = str(err)
        ctx.condition(conditions.READY, "False", err.reason, message)
        ctx.events.append(Event("Warning", err.reason, message))
        with contextlib.suppress(ApiError):  # the retry writes it again
            self._write_status(ctx)

    # -- steps ------------------------------------------------------------------------------

    def _step_validate(self, ctx: Context) -> None:
        try:
            spec = parse_cluster(ctx.body.get("spec"))
        except SpecError as err:
            raise ReconcileError("validate", "InvalidSpec", str(err), permanent=True) from err
        if ctx.old_spec:
            try:
                old: StromClusterSpec | None = parse_cluster(ctx.old_spec)
            except SpecError:
                old = None  # the previous spec was invalid: nothing to compare with
            if old is not None:
                problems = check_transition(spec, old)
                if problems:
                    message = "; ".join(str(p) for p in problems)
                    raise ReconcileError("validate", "InvalidChange", message, permanent=True)
        ctx.spec = spec
        ctx.state = self.admin.describe(ctx.ref, spec)
        if ctx.state is None:
            why = getattr(self.admin, "last_error", None) or "no answer"
            ctx.condition(
                conditions.ADMIN_API,
                "False",
                "Unreachable",
                f"cluster state unknown ({why}); acting on Kubernetes state alone",
            )
        else:
            ctx.condition(conditions.ADMIN_API, "True", "Reachable", "Admin API answered")

    def _step_scaling(self, ctx: Context) -> None:
        assert ctx.spec is not None
        names = Names(ctx.ref.name)
        live = self.api.get("apps/v1", "StatefulSet", ctx.ref.namespace, names.statefulset)
        ctx.live_statefulset = live
        desired = ctx.spec.brokers.replicas
        self._track_rebalance(ctx)
        if live is None:
            ctx.statefulset_replicas = desired
            return
        current = int((live.get("spec") or {}).get("replicas") or 0)
        state = ctx.state
        decision = scaling.decide(
            desired=desired,
            current=current,
            registered=state.registered if state else None,
            replicas_per_broker=state.replicas_per_broker if state else None,
            max_replication_factor=state.max_replication_factor if state else 1,
            reassignment_in_progress=state.reassignment_in_progress if state else False,
            leaders_per_broker=state.leaders_per_broker() if state else None,
        )
        if decision.step == "Refuse":
            self._refuse(ctx, current, decision.message)
            return
        if decision.step in ("Drain", "WaitForDrain", "ElectLeaders"):
            ctx.statefulset_replicas = current
            ctx.requeue = True
            if decision.step == "Drain" and state is not None:
                refused = self._start_moves(ctx, state, range(desired), "drain")
                if refused is not None:
                    self._refuse(ctx, current, refused)
                    return
            if decision.step == "ElectLeaders" and state is not None:
                spec, led = ctx.spec, state.led_by(decision.leaving)
                self._admin_call("scaling", lambda: self.admin.elect_preferred(ctx.ref, spec, led))
            ctx.condition(conditions.SCALING, "True", decision.step, decision.message)
            return
        ctx.statefulset_replicas = desired
        if decision.step in ("GrowStatefulSet", "ShrinkStatefulSet"):
            ctx.condition(conditions.SCALING, "True", decision.step, decision.message)
            ctx.events.append(Event("Normal", decision.step, decision.message))
        elif decision.step == "Rebalance" and state is not None:
            ctx.condition(conditions.SCALING, "False", "Steady", decision.message)
            self._start_moves(ctx, state, range(desired), "rebalance")
        else:
            ctx.condition(conditions.SCALING, "False", "Steady", decision.message)
            self._unregister_removed(ctx, state, desired, current)
            if (state is not None and current == desired and not state.reassignment_in_progress
                    and set(range(desired)) <= state.registered):
                self._start_moves(ctx, state, range(desired), "raise __consumer_offsets "
                                  "replication", balance=False)

    def _unregister_removed(self, ctx: Context, state: ClusterState | None, desired: int,
                            current: int) -> None:
        """After a scale-in: forget the removed brokers once they are down and empty."""
        if state is None or current != desired:
            return
        gone = scaling.brokers_to_unregister(state.fenced, state.replicas_per_broker, desired)
        if not gone:
            return
        spec = ctx.spec
        assert spec is not None
        self._admin_call("scaling", lambda: self.admin.unregister(ctx.ref, spec, gone))
        message = f"unregistered removed brokers {gone} (stopped, no replicas)"
        ctx.events.append(Event("Normal", "BrokersUnregistered", message))

    def _refuse(self, ctx: Context, current: int, message: str) -> None:
        ctx.statefulset_replicas = current
        ctx.condition(conditions.SCALING, "False", "ScaleInRefused", message)
        ctx.events.append(Event("Warning", "ScaleInRefused", message))

    def _admin_call(self, step: str, call: Callable[[], None]) -> None:
        try:
            call()
        except AdminError as err:
            raise ReconcileError(step, "AdminApiError", str(err)) from err

    def _start_moves(self, ctx: Context, state: ClusterState, keep: range, why: str,
                     *, balance: bool = True) -> str | None:
        """Reassign so only ``keep`` holds replicas, evenly (``balance``), and, once no broker
        leaves, with ``__consumer_offsets`` raised to its configured replication factor; the
        reason when that is impossible."""
        assert ctx.spec is not None
        moves = 0
        targets: dict[tuple[str, int], list[int]] = {}
        if balance:
            try:
                plan = scaling.rebalance_plan(state.assignment, state.racks, keep)
            except PlanError as err:
                return str(err)
            targets = dict(plan.reassignments)
            moves = len(plan.moves)
        if why != "drain":
            raised = scaling.internal_replication_targets(
                state.assignment, state.racks, keep, ctx.spec.config, pending=targets)
            moves += sum(len(set(r) - set(targets.get(tp, state.assignment[tp])))
                         for tp, r in raised.items())
            targets.update(raised)
        if not targets and not balance:
            return None
        if not targets:
            ctx.condition(
                conditions.REBALANCING,
                "False",
                "Balanced",
                f"replicas are as even as placement allows on brokers {list(keep)}",
            )
            return None
        spec = ctx.spec
        self._admin_call(
            "scaling",
            lambda: self.admin.reassign(
                ctx.ref, spec, targets, scaling.throttle_arg(self.throttle)
            ),
        )
        throttle = f"{self.throttle} B/s" if self.throttle > 0 else "unthrottled"
        message = (
            f"{why}: moving {moves} replica(s) of {len(targets)} partition(s) onto "
            f"brokers {list(keep)} ({throttle})"
        )
        ctx.status["rebalance"] = scaling.progress(moves, len(targets), 0.0)
        ctx.condition(conditions.REBALANCING, "True", "Started", message)
        ctx.events.append(Event("Normal", "RebalanceStarted", message))
        ctx.requeue = True
        return None

    def _track_rebalance(self, ctx: Context) -> None:
        """Progress of a running reassignment; when it has finished, clean up after it."""
        state, spec = ctx.state, ctx.spec
        if state is None or spec is None:
            return
        previous = dict((ctx.body.get("status") or {}).get("rebalance") or {})
        total = int(previous.get("movesTotal") or 0)
        if state.reassignment_in_progress:
            percent = state.percent_done
            ctx.status["rebalance"] = scaling.progress(
                max(total, len(state.moving)), len(state.moving), percent
            )
            shown = "unknown" if percent is None else f"{percent}%"
            ctx.condition(
                conditions.REBALANCING,
                "True",
                "Moving",
                f"{len(state.moving)} partition(s) moving, {shown} done",
            )
            ctx.requeue = True
            return
        if not conditions.is_true(ctx.conditions, conditions.REBALANCING):
            return
        self._admin_call("scaling", lambda: self.admin.clear_throttle(ctx.ref, spec))
        self._admin_call(
            "scaling", lambda: self.admin.elect_preferred(ctx.ref, spec, state.not_preferred())
        )
        ctx.status["rebalance"] = {**scaling.progress(total, 0, 100.0)}
        message = f"reassignment finished ({total} replica move(s)); throttle removed"
        ctx.condition(conditions.REBALANCING, "False", "Done", message)
        ctx.events.append(Event("Normal", "RebalanceDone", message))

    def _step_storage(self, ctx: Context) -> None:
        assert ctx.spec is not None
        claims = self.api.list(
            "v1", "PersistentVolumeClaim", ctx.ref.namespace, manifests.labels(ctx.ref.name)
        )
        sizes = {
            c["metadata"]["name"]: str(
                ((c.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
            )
            for c in claims
            if ((c.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
        }
        if not sizes:
            return
        allow: bool | None = None
        if ctx.spec.storage.storage_class_name:
            sc = self.api.get(
                "storage.k8s.io/v1", "StorageClass", None, ctx.spec.storage.storage_class_name
            )
            allow = bool(sc.get("allowVolumeExpansion")) if sc is not None else None
        decision = storage.decide(ctx.spec.storage.size, sizes, allow)
        if decision.action == "Expand":
            for name in decision.pvcs:
                self.api.patch(
                    "v1",
                    "PersistentVolumeClaim",
                    ctx.ref.namespace,
                    name,
                    {"spec": {"resources": {"requests": {"storage": ctx.spec.storage.size}}}},
                )
            ctx.condition(conditions.STORAGE_RESIZING, "True", "Expanding", decision.message)
            ctx.events.append(Event("Normal", "StorageExpanding", decision.message))
        elif decision.action in ("RejectShrink", "RejectNotExpandable"):
            ctx.condition(conditions.STORAGE_RESIZING, "False", decision.action, decision.message)
            ctx.events.append(Event("Warning", decision.action, decision.message))
        else:
            ctx.condition(conditions.STORAGE_RESIZING, "False", "UpToDate", decision.message)

    def _step_apply(self, ctx: Context) -> None:
        assert ctx.spec is not None
        for obj in manifests.desired_objects(ctx.ref, ctx.spec, self.operator):
            if obj["kind"] == "StatefulSet" and ctx.statefulset_replicas is not None:
                obj["spec"]["replicas"] = ctx.statefulset_replicas
            try:
                self.api.apply(obj)
                if obj["kind"] == "ServiceMonitor":
                    self._environment(ctx, conditions.SERVICE_MONITOR,
                                      environment.service_monitor(True))
            except ApiError as err:
                if obj["kind"] == "ServiceMonitor" and err.status == 404:
                    self._environment(ctx, conditions.SERVICE_MONITOR,
                                      environment.service_monitor(False))
                    continue
                raise ReconcileError(
                    "apply", "ApplyFailed", f"{obj['kind']} {obj['metadata']['name']}: {err}"
                ) from err

    def _environment(self, ctx: Context, type: str, verdict: environment.Verdict) -> None:
        """Set a condition about what the cluster lacks; a Warning event only when it turns
        False (not on every periodic reconcile)."""
        before = next((c for c in ctx.conditions if c.get("type") == type), None)
        ctx.condition(type, verdict.status, verdict.reason, verdict.message)
        if verdict.status == "False" and (before is None or before.get("status") != "False"):
            ctx.events.append(Event("Warning", verdict.reason, verdict.message))

    def _check_environment(self, ctx: Context, ready_pods: list[str]) -> None:
        spec, state = ctx.spec, ctx.state
        assert spec is not None
        if spec.rack is not None and state is not None:
            racks = {b: r for b, r in state.racks.items() if b in state.registered}
            self._environment(ctx, conditions.RACK_AWARE,
                              environment.rack_awareness(spec.rack.topology_key, racks))
        if not spec.network_policy.enabled or self.probe is None or self.operator is None:
            return
        if state is None or not ready_pods:
            verdict = environment.Verdict(
                "Unknown", "NotProbed", "waiting for a ready broker and the Admin API to probe")
            self._environment(ctx, conditions.NETWORK_POLICY, verdict)
            return
        names = Names(ctx.ref.name)
        host = f"{ready_pods[0]}.{names.headless}.{ctx.ref.namespace}.svc"
        connected, detail = self.probe(host, spec.listeners.kafka_port)
        is_client: bool | None = None
        try:
            ns = self.api.get("v1", "Namespace", None, self.operator.namespace)
            labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
            is_client = environment.selector_matches(
                spec.network_policy.client_namespace_labels, labels)
        except ApiError as err:
            detail = f"{detail}; reading namespace {self.operator.namespace}: {err}"
        probe = environment.PolicyProbe(
            target=f"{host}:{spec.listeners.kafka_port}", connected=connected,
            operator_is_client=is_client, detail=detail)
        self._environment(ctx, conditions.NETWORK_POLICY, environment.network_policy(probe))

    def _step_roll(self, ctx: Context) -> None:
        assert ctx.spec is not None
        desired_hash = manifests.config_hash(ctx.ref, ctx.spec)
        ctx.status["configHash"] = desired_hash
        pods = [
            _broker_pod(p)
            for p in self.api.list(
                "v1", "Pod", ctx.ref.namespace, manifests.selector_labels(ctx.ref.name)
            )
        ]
        known = [p for p in pods if p is not None]
        if not known:
            return
        state = ctx.state
        decision = rolling.next_restart(
            known,
            desired_hash,
            controller_voters=ctx.spec.controllers.replicas,
            active_controller=state.active_controller if state else None,
            under_replicated=state.under_replicated if state else None,
        )
        if decision.reason == "UpToDate":
            ctx.condition(conditions.ROLLING, "False", "UpToDate", decision.message)
            return
        ctx.requeue = True
        ctx.condition(conditions.ROLLING, "True", decision.reason, decision.message)
        if decision.restart is not None:
            self.api.delete("v1", "Pod", ctx.ref.namespace, decision.restart)
            ctx.events.append(Event("Normal", "RollingRestart", decision.message))

    def _step_status(self, ctx: Context) -> None:
        assert ctx.spec is not None
        names = Names(ctx.ref.name)
        live = self.api.get("apps/v1", "StatefulSet", ctx.ref.namespace, names.statefulset)
        live_status = (live or {}).get("status") or {}
        replicas = int(live_status.get("replicas") or 0)
        ready = int(live_status.get("readyReplicas") or 0)
        want = ctx.spec.brokers.replicas
        ctx.status.update(
            {
                "bootstrapServers": manifests.bootstrap_address(ctx.ref, ctx.spec),
                "kafkaBootstrapServers": manifests.kafka_bootstrap_address(ctx.ref, ctx.spec),
                "brokers": replicas,
                "readyBrokers": ready,
                "ready": f"{ready}/{want}",
                "brokerIds": list(range(ctx.statefulset_replicas or want)),
                "selector": manifests.label_selector(ctx.ref.name),
            }
        )
        if ctx.state is not None:
            ctx.status["partitions"] = ctx.state.partitions
            ctx.status["underReplicatedPartitions"] = ctx.state.under_replicated
            ctx.status["offlinePartitions"] = ctx.state.offline
            ctx.status["unmanagedTopics"] = topics.unmanaged(
                ctx.state.topics, self._managed_topics(ctx)
            )
        ctx.condition(conditions.RECONCILED, "True", "Applied", "all objects applied")
        pods = self.api.list("v1", "Pod", ctx.ref.namespace,
                             manifests.selector_labels(ctx.ref.name))
        ready_pods = sorted(p.name for p in map(_broker_pod, pods)
                            if p is not None and p.ready and not p.terminating)
        self._check_environment(ctx, ready_pods)
        brokers_ready = ready >= want and replicas == want
        draining = ready >= want and replicas > want  # scale-in: the extra pods go last
        if brokers_ready and not ctx.requeue:
            ctx.condition(conditions.READY, "True", "Ready", f"{ready}/{want} brokers ready")
        elif brokers_ready:
            busy = [
                c["type"]
                for c in ctx.conditions
                if c.get("status") == "True"
                and c.get("type")
                in (conditions.REBALANCING, conditions.ROLLING, conditions.SCALING)
            ]
            ctx.condition(
                conditions.READY,
                "False",
                "InProgress",
                f"{ready}/{want} brokers ready; in progress: {', '.join(busy) or 'reconcile'}",
            )
        elif draining:
            ctx.requeue = True
            ctx.condition(
                conditions.READY, "False", "InProgress",
                f"{ready} brokers ready; scaling in to {want} (the leaving brokers are drained "
                "before the StatefulSet shrinks)",
            )
        else:
            ctx.requeue = True
            ctx.condition(
                conditions.READY, "False", "BrokersNotReady", f"{ready}/{want} brokers ready"
            )
        self._write_status(ctx)

    def _managed_topics(self, ctx: Context) -> list[str]:
        out = []
        for obj in self.api.list(API_VERSION, "StromTopic", ctx.ref.namespace, {}):
            spec = obj.get("spec") or {}
            if (spec.get("clusterRef") or {}).get("name") == ctx.ref.name:
                out.append(str(spec.get("topicName") or obj["metadata"]["name"]))
        return out


def _broker_pod(pod: dict[str, Any]) -> rolling.BrokerPod | None:
    meta = pod.get("metadata") or {}
    name = str(meta.get("name", ""))
    try:
        ordinal = int(name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return None
    annotations = meta.get("annotations") or {}
    conds = (pod.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
    return rolling.BrokerPod(
        name=name,
        ordinal=ordinal,
        config_hash=str(annotations.get(manifests.CONFIG_HASH_ANNOTATION, "")),
        ready=ready,
        terminating=bool(meta.get("deletionTimestamp")),
    )


def cleanup(api: KubeApi, body: dict[str, Any]) -> None:
    """On deletion: remove what owner references can not (the cluster-scoped rack binding)."""
    ref = ref_of(body)
    api.delete(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        None,
        Names(ref.name).rack_binding(ref.namespace),
    )
