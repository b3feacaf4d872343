"""What a Kafka API handler gets: the broker core, the request, and builders for its response.

Why it exists: kio has one set of classes per API version (``kio.schema.fetch.v12.response``,
``...v17.response``), and a field exists only in the versions that have it. A handler builds its
answer once, by class and field name, through :meth:`Context.build`, which picks the classes of
the request's version and drops the fields that version does not carry, so one handler serves
every version it advertises (as Kafka's generated ``*Data`` classes do with ``setXxx`` on a
version without the field being ignored when it holds the default). A None for a string or bytes
field that only later versions make nullable is written as empty, as Kafka writes it.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, fields
from typing import Any

from kio.schema.errors import ErrorCode as KafkaErrorCode
from kio.serial._introspect import is_optional

from strom.broker.core import BrokerCore
from strom.broker.fetch_sessions import FetchSessionCache
from strom.broker.kafka.frames import Request, response_module
from strom.protocol.errors import StromError

NO_THROTTLE = datetime.timedelta(0)


_FIELDS: dict[type[Any], frozenset[str]] = {}
_NOT_NULL: dict[type[Any], dict[str, object]] = {}
_EMPTY = {"string": "", "bytes": b"", "records": b""}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in fields(cls))
        _NOT_NULL[cls] = {f.name: _EMPTY[f.metadata["kafka_type"]] for f in fields(cls)
                          if f.metadata.get("kafka_type") in _EMPTY and "tag" not in f.metadata
                          and not is_optional(f)}
    return names


@dataclass
class Context:
    core: BrokerCore
    request: Request
    listener: str
    """The Kafka listener's name: Metadata lists the endpoints registered under it."""
    apis: dict[int, tuple[int, int]]
    """Every API this listener serves: key -> (min version, max version)."""
    fetch_sessions: FetchSessionCache | None = None
    """The listener's fetch sessions (KIP-227); None: every fetch is sessionless."""

    @property
    def version(self) -> int:
        return self.request.api_version

    @property
    def body(self) -> Any:
        return self.request.body

    def cls(self, name: str) -> type[Any]:
        """A response class (top-level or nested) of this request's API version."""
        value = getattr(response_module(self.request.api_key, self.version), name)
        assert isinstance(value, type)
        return value

    def build(self, class_name: str, /, **values: Any) -> Any:
        """An instance of response class ``class_name`` with the ``values`` this version has."""
        cls = self.cls(class_name)
        names = _field_names(cls)
        empty = _NOT_NULL[cls]
        return cls(**{k: (empty[k] if v is None and k in empty else v)
                      for k, v in values.items() if k in names})

    def has(self, name: str, field: str) -> bool:
        return field in _field_names(self.cls(name))


def code(value: int) -> KafkaErrorCode:
    """A Strom error code (Kafka's numbers) as kio's enum."""
    return KafkaErrorCode(value)


def error_of(err: StromError) -> KafkaErrorCode:
    return KafkaErrorCode(int(err.code))


def ms(delta: datetime.timedelta) -> int:
    return int(delta / datetime.timedelta(milliseconds=1))


def topics_by_id(core: BrokerCore) -> dict[uuid.UUID | None, str]:
    """Kafka topic id -> name, for the versions that name topics by id (Fetch v13+,
    OffsetCommit and OffsetFetch v10). The zero id names no topic (Kafka's UNKNOWN_TOPIC_ID),
    and neither does a null one: ``.get(topic.topic_id)`` is the whole lookup."""
    by_id: dict[uuid.UUID | None, str] = {
        topic_uuid(t.topic_id): name for name, t in core.metadata.topics().items()}
    by_id.pop(uuid.UUID(int=0), None)
    return by_id


def topic_uuid(topic_id: str) -> uuid.UUID:
    """Strom's topic id string as Kafka's UUID (the zero UUID when it is not one)."""
    try:
        return uuid.UUID(topic_id)
    except ValueError:
        return uuid.UUID(int=0)
