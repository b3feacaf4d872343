"""Single-binary container images as OCI archives, for the images the cluster itself needs
(the pause sandbox, CoreDNS): no registry is reachable here, and a static Go binary needs no
base. The archive is an OCI image layout in a tar (``oci-layout``, ``index.json``,
``blobs/sha256/...``) with one uncompressed layer; ``ctr images import`` loads it and names it
from the ``io.containerd.image.name`` annotation.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _blob(data: bytes, media_type: str) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": f"sha256:{hashlib.sha256(data).hexdigest()}",
            "size": len(data)}


def layer_tar(files: Sequence[tuple[str, bytes, int]]) -> bytes:
    """A layer holding ``(path, content, mode)`` files (owned by root, fixed mtime: the same
    input gives the same digest)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content, mode in files:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(content), mode, 0
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def image_archive(name: str, files: Sequence[tuple[str, bytes, int]],
                  entrypoint: Sequence[str], *, user: str = "0",
                  labels: dict[str, str] | None = None) -> bytes:
    """The OCI archive (tar bytes) of image ``name`` (``repo:tag``)."""
    layer = layer_tar(files)
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": list(entrypoint), "User": user, "Labels": labels or {},
                   "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers",
                   "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
    }, sort_keys=True).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST,
                           "config": _blob(config, CONFIG), "layers": [_blob(layer, LAYER)]},
                          sort_keys=True).encode()
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        **_blob(manifest, MANIFEST),
        "annotations": {"io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": tag}}]}).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        entries = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)]
        entries += [(f"blobs/sha256/{hashlib.sha256(b).hexdigest()}", b)
                    for b in (layer, config, manifest)]
        for path, data in entries:
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def binary_image(name: str, binary: Path, entrypoint_args: Sequence[str] = ()) -> bytes:
    """An image holding only ``binary`` as ``/<its name>``, which is the entrypoint."""
    target = f"/{binary.name}"
    return image_archive(name, [(target, binary.read_bytes(), 0o755)],
                         [target, *entrypoint_args],
                         labels={"org.opencontainers.image.source": "strom kube"})
