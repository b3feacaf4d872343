"""One description of each CRD field, read two ways: to parse a spec and to write the CRD schema.

The typed specs in :mod:`strom_operator.model.specs` are frozen dataclasses whose fields carry a
:class:`Constraints` in their metadata (description, minimum, pattern, ...). :func:`parse` walks a
dataclass and turns a plain dict (what Kubernetes stores) into the typed object, collecting every
problem as a :class:`~strom_operator.model.errors.FieldError` that names the field's JSON path and
how to fix it. :func:`openapi_schema` walks the same dataclass and produces the structural OpenAPI
v3 schema that ``crdgen`` writes into ``crds/``. Because both come from one place, the API server
and the operator can not disagree about what a valid object is.

Rules that span fields or compare old and new objects are :class:`Rule` objects: a CEL expression
for the API server (``x-kubernetes-validations``) and a Python function with the same meaning that
the operator runs too (kmock and old API servers do not evaluate CEL), so the logic is unit-tested
once.

Supported field types: ``str``, ``int``, ``float``, ``bool``, ``Literal[...]`` of strings or ints,
``X | None`` (optional, never required), ``list[X]``, ``dict[str, str]``, :data:`ConfigMap`
(``dict[str, str | int]``: ``x-kubernetes-int-or-string`` values) and nested dataclasses.

Why config values are int-or-string and not free-form: the API server compiles every CEL rule
against the types of the schema beneath it, and a value with no type (only
``x-kubernetes-preserve-unknown-fields``) can not be converted ("failed to convert to declType for
CEL validation rules"), so Kubernetes refuses the whole CRD. Int-or-string is the one typed
schema that still takes both ``retention.ms: 604800000`` and ``cleanup.policy: compact``;
booleans and fractions must then be quoted (``"true"``, ``"0.5"``). ``maxProperties`` bounds the
map so the rules' estimated cost stays inside the API server's budget.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

from strom_operator.model.errors import FieldError, SpecError

T = TypeVar("T")

#: Key/value configuration (Kafka-style properties). Values are strings or integers, as the
#: CRD's ``x-kubernetes-int-or-string`` allows; booleans and fractions are quoted strings.
ConfigValue = str | int
ConfigMap = dict[str, ConfigValue]

#: Most keys one ``config`` map may hold (``maxProperties``). The API server estimates a CEL
#: rule's cost from the largest map the schema allows; without a bound the ``config`` rules
#: exceed the per-rule budget (measured on Kubernetes 1.34: by a factor of 1.3).
CONFIG_MAX_KEYS = 256

#: Said in the CRD's description of every ``config`` map and in the operator's errors.
CONFIG_VALUES_NOTE = (
    'Values are strings or integers: quote booleans and fractions, e.g. "true", "0.5".'
)


def config_value_str(value: object) -> str:
    """A config value as the broker reads it (Kafka properties are strings; booleans lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclasses.dataclass(frozen=True)
class Rule:
    """A validation rule that the API server evaluates as CEL and the operator as Python.

    ``check(new, old)`` returns True when the object is valid; ``old`` is None on create (CEL
    transition rules, those mentioning ``oldSelf``, are then skipped by the API server too).
    ``new``/``old`` are the parsed objects of the type the rule is attached to.
    """

    name: str
    cel: str
    message: str
    check: Callable[[Any, Any], bool]
    field_path: str = ""
    reason: str = "FieldValueInvalid"

    @property
    def is_transition(self) -> bool:
        return "oldSelf" in self.cel

    def as_validation(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.cel, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        out["reason"] = self.reason
        return out


@dataclasses.dataclass(frozen=True)
class Constraints:
    """Schema facts about one field (all optional)."""

    description: str = ""
    minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None
    format: str | None = None
    fix: str = ""  # how to fix a bad value, appended to error messages
    rules: tuple[Rule, ...] = ()  # CEL rules placed on this field's own schema
    list_type: str | None = None  # x-kubernetes-list-type for lists


def spec_field(
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    json_name: str | None = None,
    **constraints: Any,
) -> Any:
    """A dataclass field with schema constraints; ``json_name`` overrides the camelCase key."""
    metadata = {"constraints": Constraints(**constraints), "json_name": json_name}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def json_name(field: dataclasses.Field[Any]) -> str:
    explicit = field.metadata.get("json_name")
    if explicit:
        return str(explicit)
    head, *rest = field.name.split("_")
    return head + "".join(part.title() for part in rest)


def constraints_of(field: dataclasses.Field[Any]) -> Constraints:
    c = field.metadata.get("constraints")
    return c if isinstance(c, Constraints) else Constraints()


def class_rules(cls: type) -> tuple[Rule, ...]:
    rules = getattr(cls, "__rules__", ())
    return tuple(rules)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) < len(get_args(tp)) and len(args) == 1:
            return args[0], True
    return tp, False


def _is_config_map(tp: Any) -> bool:
    return bool(get_origin(tp) is dict and get_args(tp) == (str, ConfigValue))


def _required(field: dataclasses.Field[Any], tp: Any) -> bool:
    _, optional = _unwrap_optional(tp)
    no_default = (
        field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    )
    return no_default and not optional


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def parse(cls: type[T], data: Any, path: str = "spec") -> T:
    """Parse ``data`` into ``cls``; raise :class:`SpecError` listing every problem found."""
    result, errors = parse_collect(cls, data, path)
    if errors or result is None:
        raise SpecError(errors)
    return result


def parse_collect(cls: type[T], data: Any, path: str = "spec") -> tuple[T | None, list[FieldError]]:
    """Like :func:`parse` but returns ``(object or None, errors)`` so callers can add checks."""
    errors: list[FieldError] = []
    result = _parse_dataclass(cls, data, path, errors)
    if not errors and result is not None:
        errors.extend(check_rules(result, None, path))
    return (typing.cast(T, result) if not errors else None), errors


def check_rules(new: Any, old: Any, path: str = "spec") -> list[FieldError]:
    """Evaluate every :class:`Rule` of ``new`` (a parsed dataclass) and its nested fields."""
    errors: list[FieldError] = []
    for rule, obj, old_obj, where in _all_rules(type(new), new, path, old):
        if rule.is_transition and old_obj is None:
            continue
        if not rule.check(obj, old_obj):
            target = where + (rule.field_path if rule.field_path else "")
            errors.append(FieldError(target, rule.message))
    return errors


def _all_rules(cls: type, obj: Any, path: str, old: Any = None) -> list[tuple[Rule, Any, Any, str]]:
    out: list[tuple[Rule, Any, Any, str]] = []
    if obj is None or not dataclasses.is_dataclass(cls):
        return out
    for rule in class_rules(cls):
        out.append((rule, obj, old, path))
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        value = getattr(obj, f.name)
        old_value = getattr(old, f.name) if old is not None else None
        sub = f"{path}.{json_name(f)}"
        for rule in constraints_of(f).rules:
            if value is not None:
                out.append((rule, value, old_value, sub))
        tp, _ = _unwrap_optional(hints[f.name])
        if isinstance(tp, type) and dataclasses.is_dataclass(tp) and value is not None:
            out.extend(_all_rules(tp, value, sub, old_value))
    return out


def _parse_dataclass(cls: type, data: Any, path: str, errors: list[FieldError]) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        errors.append(FieldError(path, f"must be an object, got {type(data).__name__}"))
        return None
    hints = _hints(cls)
    known = {json_name(f): f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            choices = ", ".join(sorted(known))
            errors.append(
                FieldError(f"{path}.{key}", f"unknown field; known fields here are: {choices}")
            )
    kwargs: dict[str, Any] = {}
    for name, f in known.items():
        sub = f"{path}.{name}"
        tp = hints[f.name]
        if name not in data or data[name] is None:
            if _required(f, tp):
                fix = constraints_of(f).fix
                msg = "is required" + (f": {fix}" if fix else "")
                errors.append(FieldError(sub, msg))
            continue  # the dataclass default applies
        kwargs[f.name] = _parse_value(tp, data[name], sub, errors, constraints_of(f))
    if any(e.path.startswith(path) for e in errors):
        # Return a best-effort object only when construction is possible.
        try:
            return cls(**kwargs)
        except TypeError:
            return None
    return cls(**kwargs)


def _parse_value(tp: Any, value: Any, path: str, errors: list[FieldError], c: Constraints) -> Any:
    tp, _ = _unwrap_optional(tp)
    origin = get_origin(tp)
    fix = f"; {c.fix}" if c.fix else ""
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices or type(value) is bool:
            listed = ", ".join(repr(x) for x in choices)
            errors.append(FieldError(path, f"must be one of {listed}, got {value!r}{fix}"))
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _parse_dataclass(tp, value, path, errors)
    if _is_config_map(tp):
        if not isinstance(value, Mapping):
            errors.append(FieldError(path, "must be a map of key: value"))
            return {}
        if len(value) > CONFIG_MAX_KEYS:
            errors.append(FieldError(path, f"has {len(value)} keys; at most {CONFIG_MAX_KEYS}"))
        out: dict[str, ConfigValue] = {}
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, str | int):
                quoted = config_value_str(v) if isinstance(v, bool | float) else "..."
                errors.append(
                    FieldError(
                        f"{path}[{k}]",
                        f"must be a string or an integer, got {v!r}; quote it: {k}: "
                        f'"{quoted}" (the CRD declares config values int-or-string){fix}',
                    )
                )
            else:
                out[str(k)] = v
        return out
    if origin is dict:
        if not isinstance(value, Mapping):
            errors.append(FieldError(path, "must be a map of string to string"))
            return {}
        for k, v in value.items():
            if not isinstance(v, str):
                errors.append(FieldError(f"{path}[{k}]", f"must be a string, got {v!r}"))
        return {str(k): str(v) for k, v in value.items()}
    if origin is list:
        (item_tp,) = get_args(tp)
        if not isinstance(value, list):
            errors.append(FieldError(path, f"must be a list, got {type(value).__name__}"))
            return []
        if c.min_items is not None and len(value) < c.min_items:
            errors.append(FieldError(path, f"must have at least {c.min_items} item(s){fix}"))
        if c.max_items is not None and len(value) > c.max_items:
            errors.append(FieldError(path, f"must have at most {c.max_items} item(s){fix}"))
        items = [
            _parse_value(item_tp, v, f"{path}[{i}]", errors, Constraints(pattern=c.pattern))
            for i, v in enumerate(value)
        ]
        if c.list_type == "set" and len(set(map(repr, items))) != len(items):
            errors.append(FieldError(path, "must not contain duplicates"))
        return items
    if tp is bool:
        if not isinstance(value, bool):
            errors.append(FieldError(path, f"must be true or false, got {value!r}"))
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(FieldError(path, f"must be an integer, got {value!r}{fix}"))
            return value
        _check_range(value, path, errors, c)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            errors.append(FieldError(path, f"must be a number, got {value!r}{fix}"))
            return value
        _check_range(value, path, errors, c)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            errors.append(FieldError(path, f"must be a string, got {value!r}{fix}"))
            return value
        if c.min_length is not None and len(value) < c.min_length:
            errors.append(FieldError(path, f"must be at least {c.min_length} characters{fix}"))
        if c.max_length is not None and len(value) > c.max_length:
            errors.append(FieldError(path, f"must be at most {c.max_length} characters{fix}"))
        if c.pattern is not None and not re.search(c.pattern, value):
            errors.append(
                FieldError(path, f"{value!r} does not match the pattern {c.pattern}{fix}")
            )
        return value
    raise TypeError(f"unsupported spec field type {tp!r} at {path}")  # pragma: no cover


def _check_range(value: float, path: str, errors: list[FieldError], c: Constraints) -> None:
    fix = f"; {c.fix}" if c.fix else ""
    if c.minimum is not None and value < c.minimum:
        errors.append(FieldError(path, f"must be >= {_num(c.minimum)}, got {value}{fix}"))
    if c.maximum is not None and value > c.maximum:
        errors.append(FieldError(path, f"must be <= {_num(c.maximum)}, got {value}{fix}"))


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


# --------------------------------------------------------------------------------------------
# Serialising back (for defaults in the schema and for status/round trips)
# --------------------------------------------------------------------------------------------


def to_dict(obj: Any) -> Any:
    """The JSON form of a parsed spec (camelCase keys; None fields left out)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if value is not None:
                out[json_name(f)] = to_dict(value)
        return out
    if isinstance(obj, list):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


# --------------------------------------------------------------------------------------------
# OpenAPI v3 (structural) schema
# --------------------------------------------------------------------------------------------


def openapi_schema(cls: type) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a spec dataclass, with CEL rules and defaults."""
    return _schema_of_dataclass(cls)


def _schema_of_dataclass(cls: type) -> dict[str, Any]:
    hints = _hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        name = json_name(f)
        tp = hints[f.name]
        c = constraints_of(f)
        schema = _schema_of(tp, c)
        if c.description:
            rest = {k: v for k, v in schema.items() if k != "description"}
            # A config map's own note (how to write values) follows the field's description.
            own = schema.get("description") if _is_config_map(_unwrap_optional(tp)[0]) else None
            text = f"{c.description} {own}" if own else c.description
            schema = {"description": text, **rest}
        default = _default_of(f)
        if default is not None:
            schema["default"] = default
        if c.rules:
            schema["x-kubernetes-validations"] = [r.as_validation() for r in c.rules]
        props[name] = schema
        if _required(f, tp):
            required.append(name)
    out: dict[str, Any] = {"type": "object"}
    doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    if doc and not doc.startswith(cls.__name__ + "("):
        out["description"] = " ".join(doc.split())
    out["properties"] = props
    if required:
        out["required"] = required
    rules = class_rules(cls)
    if rules:
        out["x-kubernetes-validations"] = [r.as_validation() for r in rules]
    return out


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING and f.default is not None:
        return to_dict(f.default)
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            # Nested defaults only apply when the parent object exists: default it to {}.
            return {}
        return to_dict(value)
    return None


def _schema_of(tp: Any, c: Constraints) -> dict[str, Any]:
    tp, _ = _unwrap_optional(tp)
    origin = get_origin(tp)
    if origin is Literal:
        choices = list(get_args(tp))
        kind = "integer" if all(isinstance(x, int) for x in choices) else "string"
        return {"type": kind, "enum": choices}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _schema_of_dataclass(tp)
    if _is_config_map(tp):
        return {
            "type": "object",
            "description": CONFIG_VALUES_NOTE,
            "maxProperties": CONFIG_MAX_KEYS,
            "additionalProperties": {"x-kubernetes-int-or-string": True},
        }
    if origin is dict:
        return {"type": "object", "additionalProperties": {"type": "string"}}
    if origin is list:
        (item_tp,) = get_args(tp)
        out: dict[str, Any] = {
            "type": "array",
            "items": _schema_of(item_tp, Constraints(pattern=c.pattern)),
        }
        if c.min_items is not None:
            out["minItems"] = c.min_items
        if c.max_items is not None:
            out["maxItems"] = c.max_items
        if c.list_type:
            out["x-kubernetes-list-type"] = c.list_type
        return out
    if tp is bool:
        return {"type": "boolean"}
    if tp is int or tp is float:
        out = {"type": "integer" if tp is int else "number"}
        if c.minimum is not None:
            out["minimum"] = _num(c.minimum)
        if c.maximum is not None:
            out["maximum"] = _num(c.maximum)
        return out
    if tp is str:
        out = {"type": "string"}
        if c.format:
            out["format"] = c.format
        if c.pattern:
            out["pattern"] = c.pattern
        if c.min_length is not None:
            out["minLength"] = c.min_length
        if c.max_length is not None:
            out["maxLength"] = c.max_length
        return out
    raise TypeError(f"unsupported spec field type {tp!r}")  # pragma: no cover
