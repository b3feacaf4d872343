"""The kube fixture's session against a cluster left running by a killed run (no cluster needed:
the cluster module's steps are replaced by a model of the kernel settings they touch).

Stop 28's CI ran on a machine where an earlier run had been killed with its cluster up: its
kubelet had rewritten three kernel settings, the session recorded those as the machine's own,
``up`` cleaned the earlier cluster (putting back the true values) and the final check then
reported the true values as changed."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from strom.testing.kube import cluster, fixture, lock

MACHINE = {"vm/overcommit_memory": "0", "kernel/panic": "1", "kernel/panic_on_oops": "0"}
KUBELET = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}


class _Machine:
    """Kernel settings as a dict; ``down`` puts back what the earlier cluster recorded."""

    def __init__(self) -> None:
        self.kernel = dict(KUBELET)  # the earlier run's kubelet left its values
        self.earlier_state: dict[str, Any] = {"sysctls": dict(MACHINE)}

    def down(self, paths: Any, *, quiet: bool = False) -> list[str]:
        restored = [k for k, v in self.earlier_state.get("sysctls", {}).items()
                    if self.kernel.get(k) != v]
        self.kernel.update(self.earlier_state.get("sysctls", {}))
        self.earlier_state = {}
        return [f"restored {k}" for k in restored]

    def read(self, keys: Any = None) -> dict[str, str]:
        return dict(self.kernel)

    def up(self, bin_dir: Path, paths: Any) -> dict[str, float]:
        left = self.down(paths, quiet=True)  # as cluster.up does
        assert left == []
        self.earlier_state = {"sysctls": self.read()}
        self.kernel.update(KUBELET)
        raise cluster.KubeError("stopped here: the model goes no further than up")

    def leftovers(self, paths: Any, state: Any, before: dict[str, str]) -> list[str]:
        return [f"kernel setting {k}={self.kernel.get(k)} (was {v})" for k, v in before.items()
                if self.kernel.get(k) != v]


def test_settings_left_by_a_killed_cluster_are_not_taken_as_the_machines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    machine = _Machine()
    monkeypatch.setenv("STROM_KUBE_BIN", "/nonexistent-kube-bin")
    monkeypatch.delenv("STROM_KUBE_EXTERNAL", raising=False)
    monkeypatch.setattr(fixture, "_unavailable_reason", lambda: None)
    monkeypatch.setattr(lock, "hold", lambda say=None: contextlib.nullcontext())
    monkeypatch.setattr(cluster, "down", machine.down)
    monkeypatch.setattr(cluster, "read_sysctls", machine.read)
    monkeypatch.setattr(cluster, "up", machine.up)
    monkeypatch.setattr(cluster, "leftovers", machine.leftovers)
    monkeypatch.setattr(cluster, "load_state", lambda paths: machine.earlier_state)

    session = fixture._Session()
    session.prepare()

    assert session.error is not None and "stopped here" in session.error
    assert session.sysctls == MACHINE
    assert machine.kernel == MACHINE  # finish() (called on the error) ran down
    assert machine.leftovers(None, None, session.sysctls) == []
