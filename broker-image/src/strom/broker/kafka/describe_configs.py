"""DescribeConfigs (key 32), versions 1-4: topic and broker configs with their sources, through
the admin handler the gRPC front uses (:func:`strom.broker.admin.describe_configs`).

Supports TOPIC (2) resources (every topic config: DYNAMIC_TOPIC_CONFIG for overrides,
STATIC_BROKER_CONFIG for broker-level defaults set in the broker's config, DEFAULT_CONFIG
otherwise) and BROKER (4) resources (every static key, read-only; the name must be this
broker's id, or empty), ``configuration_keys`` filters, documentation (v3+, when asked),
synonyms (when asked, v1+; highest precedence first, as Kafka lists them: the topic override,
then the broker key that sets the default as configured and its built-in default -- a topic
config without a broker key in Strom lists its own name as the DEFAULT_CONFIG synonym), config
types (v3+).

Not supported: BROKER_LOGGER and other resource types (INVALID_REQUEST per resource), dynamic
broker configs (broker configs are static), sensitive configs (there are none).
"""

from __future__ import annotations

from typing import Any

from strom.broker import admin
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import admin_pb2

KEY = 32
VERSIONS = (1, 4)
SOURCES = {admin.SOURCE_TOPIC: 1, admin.SOURCE_STATIC_BROKER: 4, admin.SOURCE_DEFAULT: 5}
TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "LONG": 5, "DOUBLE": 6, "LIST": 7}


async def handle(ctx: Context) -> Any:
    body = ctx.body
    await admin.metadata_barrier(ctx.core)
    request = admin_pb2.DescribeConfigsRequest()
    for r in body.resources:
        request.resources.add(type=r.resource_type, name=r.resource_name)
    answer = await admin.describe_configs(ctx.core, request)
    docs = bool(getattr(body, "include_documentation", False))
    synonyms = bool(getattr(body, "include_synonyms", False))
    results = []
    for r, result in zip(body.resources, answer.results, strict=True):
        keys = set(r.configuration_keys) if r.configuration_keys else None
        entries = tuple(
            ctx.build("DescribeConfigsResourceResult", name=e.name, value=e.value,
                      read_only=e.read_only, config_source=SOURCES.get(e.source, 0),
                      is_default=e.is_default, is_sensitive=False,
                      synonyms=tuple(ctx.build("DescribeConfigsSynonym", name=y.name,
                                               value=y.value, source=SOURCES.get(y.source, 0))
                                     for y in e.synonyms) if synonyms else (),
                      config_type=TYPES.get(e.type, 0),
                      documentation=e.documentation if docs else None)
            for e in result.entries if keys is None or e.name in keys)
        results.append(ctx.build(
            "DescribeConfigsResult", error_code=code(result.error_code),
            # Kafka answers "" where there is nothing to say (its generated default), not null
            error_message=result.error_message, resource_type=r.resource_type,
            resource_name=r.resource_name, configs=entries))
    return ctx.build("DescribeConfigsResponse", throttle_time=NO_THROTTLE, results=tuple(results))
