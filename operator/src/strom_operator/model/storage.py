"""Storage size changes: grow the PersistentVolumeClaims in place, never shrink.

StatefulSet ``volumeClaimTemplates`` are immutable, so a larger ``spec.storage.size`` is applied by
patching each existing PVC's ``spec.resources.requests.storage`` — which the API server only allows
when the StorageClass has ``allowVolumeExpansion: true``.  A smaller size is refused (the CRD's CEL
rule refuses it too; this is the operator's own check for API servers without CEL).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from strom_operator.model.quantity import parse_quantity

Action = Literal["None", "Expand", "RejectShrink", "RejectNotExpandable"]


@dataclasses.dataclass(frozen=True)
class StorageDecision:
    action: Action
    message: str
    pvcs: tuple[str, ...] = ()  # the claims to patch for Expand


def decide(
    desired_size: str,
    claims: dict[str, str],
    allow_expansion: bool | None,
) -> StorageDecision:
    """``claims`` maps PVC name -> its requested size now; ``allow_expansion`` is the
    StorageClass's flag (None when it could not be read: then try; the API server decides)."""
    want = parse_quantity(desired_size)
    smaller = sorted(n for n, size in claims.items() if parse_quantity(size) < want)
    larger = sorted(n for n, size in claims.items() if parse_quantity(size) > want)
    if larger:
        return StorageDecision(
            "RejectShrink",
            f"spec.storage.size {desired_size} is smaller than the volumes ({claims[larger[0]]} on "
            f"{larger[0]}); volumes can not shrink: set spec.storage.size back to at least "
            f"{claims[larger[0]]}",
        )
    if not smaller:
        return StorageDecision("None", "volumes have the desired size")
    if allow_expansion is False:
        return StorageDecision(
            "RejectNotExpandable",
            f"the StorageClass does not allow volume expansion; {len(smaller)} volume(s) stay "
            f"smaller than {desired_size}: enable allowVolumeExpansion or restore the size",
        )
    return StorageDecision(
        "Expand", f"expanding {len(smaller)} volume(s) to {desired_size}", tuple(smaller)
    )
