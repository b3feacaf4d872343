"""Pure parsers for flag values: bootstrap addresses, ``k=v`` pairs, key splitting, times.

They raise ``UsageError`` with a message naming the flag and the fix, so a bad value ends as one
line and exit code 2, the same as the errors argparse finds itself.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable

from strom.cli.errors import UsageError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "STROM_BOOTSTRAP_SERVERS"

EARLIEST = "earliest"
LATEST = "latest"


def default_bootstrap(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get(BOOTSTRAP_ENV, "").strip() or DEFAULT_BOOTSTRAP


def parse_bootstrap(value: str, flag: str = "--bootstrap-server") -> str:
    """Validate ``HOST:PORT[,HOST:PORT...]``; return it normalised (no blanks)."""
    servers = [s.strip() for s in value.split(",") if s.strip()]
    if not servers:
        raise UsageError(f"{flag} is empty; give HOST:PORT, e.g. {DEFAULT_BOOTSTRAP}")
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(
                f"{flag} {server!r} is not HOST:PORT; give e.g. {DEFAULT_BOOTSTRAP}"
            )
    return ",".join(servers)


def parse_kv(value: str, flag: str) -> tuple[str, str]:
    """``key=value`` (the value may contain '=' and may be empty)."""
    key, sep, val = value.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"{flag} {value!r} is not KEY=VALUE; write e.g. {flag} retention.ms=60000")
    return key, val


def parse_kv_list(values: Iterable[str] | None, flag: str) -> dict[str, str]:
    """Repeated ``--flag k=v``: later values win, as they would in a config file."""
    result: dict[str, str] = {}
    for value in values or ():
        key, val = parse_kv(value, flag)
        result[key] = val
    return result


def split_key(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    """Split one input line into (key, value) at the first ``separator``.

    Without a separator the whole line is the value and the key is null. With one, a line that
    does not contain it is an error, as in Kafka's console producer (``parse.key=true``).
    """
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise ValueError(f"no key separator {separator.decode(errors='replace')!r} in the line")
    return key, value


def strip_newline(line: bytes) -> bytes:
    if line.endswith(b"\r\n"):
        return line[:-2]
    if line.endswith(b"\n"):
        return line[:-1]
    return line


def parse_time(value: str, flag: str = "--time") -> int | str:
    """``earliest``, ``latest``, milliseconds since the epoch, or an ISO-8601 date-time.

    An ISO-8601 value without a zone is taken as UTC (so results do not depend on the machine's
    zone); ``2024-05-01``, ``2024-05-01T12:00:00Z`` and ``2024-05-01T14:00:00+02:00`` all work.
    Returns the string ``earliest``/``latest`` or a non-negative timestamp in milliseconds.
    """
    text = value.strip()
    lowered = text.lower()
    if lowered in (EARLIEST, LATEST):
        return lowered
    if text.lstrip("-").isdigit():
        ms = int(text)
        if ms < 0:
            raise UsageError(
                f"{flag} {value!r} is negative; give earliest, latest, a timestamp in ms "
                "since the epoch, or an ISO-8601 date-time"
            )
        return ms
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"{flag} {value!r} is not earliest, latest, milliseconds since the epoch or an "
            "ISO-8601 date-time (e.g. 2024-05-01T12:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise UsageError(f"{flag} {value!r} is before 1970; give a later time")
    return ms


def format_timestamp(ms: int | None) -> str | None:
    """Milliseconds since the epoch as ISO-8601 UTC with milliseconds (None/-1 -> None)."""
    if ms is None or ms < 0:
        return None
    when = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_offset(value: str, flag: str = "--offset") -> int | str:
    """``earliest``, ``latest`` or a non-negative offset (Kafka's console consumer ``--offset``)."""
    text = value.strip().lower()
    if text in (EARLIEST, LATEST):
        return text
    if text.isdigit():
        return int(text)
    raise UsageError(f"{flag} {value!r} is not an offset; give a number >= 0, earliest or latest")


def parse_acks(value: str) -> int | str:
    text = value.strip().lower()
    if text in ("all", "-1"):
        return "all"
    if text in ("0", "1"):
        return int(text)
    raise UsageError(f"--acks {value!r} is not valid; give 0, 1 or all")


_SIZE_UNITS = {
    "": 1, "b": 1, "byte": 1, "bytes": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3,
}


def parse_size(value: str, flag: str) -> int:
    """``10MB`` (10,000,000), ``512KiB`` (524,288), ``1.5GiB`` or plain bytes -> bytes (> 0).

    Units are case-insensitive; KB/MB/GB are decimal and KiB/MiB/GiB binary, as in ``df -H`` /
    ``df -h``, so a value means the same thing here as in the tool the operator read it from.
    """
    text = value.strip().replace(" ", "").replace("_", "")
    number = text.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = text[len(number):].lower()
    factor = _SIZE_UNITS.get(unit)
    try:
        amount = float(number)
    except ValueError:
        amount = -1.0
    if factor is None or amount <= 0 or amount != amount or amount == float("inf"):
        raise UsageError(f"{flag} {value!r} is not a size; give e.g. 10MB, 512KiB or a number "
                         "of bytes (> 0)")
    size = int(amount * factor)
    if size < 1:
        raise UsageError(f"{flag} {value!r} is less than one byte")
    return size


def parse_int_list(value: str, flag: str) -> list[int]:
    """``2,3,4`` -> [2, 3, 4] (broker ids: each >= 0, no repeats)."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or not all(v.isdigit() for v in items):
        raise UsageError(f"{flag} {value!r} is not a comma-separated list of ids, e.g. 2,3,4")
    ids = [int(v) for v in items]
    if len(set(ids)) != len(ids):
        raise UsageError(f"{flag} {value!r} names an id twice")
    return ids


def parse_name_list(value: str, flag: str) -> list[str]:
    """``a,b`` -> ["a", "b"] (topic names, in order, without repeats)."""
    names = list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if not names:
        raise UsageError(f"{flag} is empty; give comma-separated names, e.g. {flag} a,b")
    return names
