"""ApiVersions (key 18), versions 0-4: the APIs and version ranges this listener serves.

Supports: every version Kafka 4.x serves; an unknown newer version is answered in version 0
with UNSUPPORTED_VERSION and the ranges (KIP-511, done in ``frames``); only the APIs this
listener implements are listed, so a client never picks one it would fail on later.

Not supported: feature flags (``supported_features`` / ``finalized_features`` are empty: Strom
has no feature-versioned metadata, so clients fall back to the ranges alone).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.broker.kafka.context import NO_THROTTLE, Context

KEY = 18
VERSIONS = (0, 4)


async def handle(ctx: Context) -> Any:
    keys = tuple(ctx.build("ApiVersion", api_key=key, min_version=low, max_version=high)
                 for key, (low, high) in sorted(ctx.apis.items()))
    return ctx.build("ApiVersionsResponse", error_code=ErrorCode.none, api_keys=keys,
                     throttle_time=NO_THROTTLE)
