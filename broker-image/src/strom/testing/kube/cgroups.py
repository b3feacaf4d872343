"""The node's cgroups (v1): ``/kubestrom`` in every mounted hierarchy, which is kubelet's
``cgroupRoot`` (pods go below ``/kubestrom/kubepods``) and holds ``/kubestrom/system`` for the
node's own daemons (containerd and its shims, kubelet, kube-proxy).

So every process the node ever started is in one tree: ``down`` reads the PIDs from its
``cgroup.procs`` files, stops them, and removes the directories bottom-up, leaving the
machine's other cgroups as they were.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from strom.testing.kube import layout as L

SYSTEM = "system"


def hierarchies(mounts: str | None = None, *, unified: bool = False) -> list[Path]:
    """Mount points of the writable v1 hierarchies, the named ``systemd`` one included (kubelet
    wants its cgroup root in every mounted hierarchy), and with ``unified`` the cgroup2 mount
    too (on a hybrid machine runc mirrors the pod cgroups there: ``down`` must find them)."""
    text = mounts if mounts is not None else Path("/proc/mounts").read_text()
    seen: dict[str, Path] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[2] not in ("cgroup", "cgroup2"):
            continue
        if parts[2] == "cgroup2":
            if unified:
                seen.setdefault("cgroup2", Path(parts[1]))
            continue
        opts = set(parts[3].split(","))
        if "ro" in opts:
            continue
        controllers = ",".join(sorted(opts - {"rw", "relatime", "nosuid", "nodev", "noexec"}))
        seen.setdefault(controllers, Path(parts[1]))
    return sorted(seen.values())


def roots(*, unified: bool = False) -> list[Path]:
    return [h / L.NAME for h in hierarchies(unified=unified)]


def create() -> None:
    """``/kubestrom`` and ``/kubestrom/system`` in every hierarchy (cpuset copies its parent's
    cpus and mems, or nothing could join it)."""
    for root in roots():
        for path in (root, root / SYSTEM):
            path.mkdir(exist_ok=True)
            if (path / "cpuset.cpus").exists():
                for name in ("cpuset.cpus", "cpuset.mems"):
                    if not (path / name).read_text().strip():
                        (path / name).write_text((path.parent / name).read_text())


def join(pid: int) -> None:
    """Move ``pid`` into ``/kubestrom/system`` in every hierarchy (its children follow)."""
    for root in roots():
        (root / SYSTEM / "cgroup.procs").write_text(f"{pid}\n")


def pids() -> list[int]:
    """Every process in the tree, in any hierarchy."""
    found: set[int] = set()
    for root in roots(unified=True):
        if not root.exists():
            continue
        for dirpath, _dirs, files in os.walk(root):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    text = (Path(dirpath) / "cgroup.procs").read_text()
                    found.update(int(p) for p in text.split())
    return sorted(found)


def remove() -> list[str]:
    """rmdir the tree bottom-up in every hierarchy (after its processes are gone); returns the
    directories that could not be removed."""
    left = []
    for root in roots(unified=True):
        if not root.exists():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(root), key=lambda t: -len(t[0])):
            try:
                os.rmdir(dirpath)
            except OSError as exc:
                left.append(f"{dirpath}: {exc.strerror}")
    return left
