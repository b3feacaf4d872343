"""The controller voter list, ``ID@HOST:PORT,...``: one parser for the broker config and the
standalone controller's ``--voters`` flag (both must read it the same way, or a broker and its
controllers disagree about who votes)."""

from __future__ import annotations

__all__ = ["parse_voters"]


def parse_voters(text: str) -> dict[int, str]:
    """``0@127.0.0.1:9093,1@127.0.0.1:9094`` -> ``{0: "127.0.0.1:9093", 1: ...}``."""
    out: dict[int, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        node, sep, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not host or not node.strip().isdigit() or not port.isdigit():
            raise ValueError(f"voter {item!r} is not ID@HOST:PORT (e.g. 0@127.0.0.1:9093)")
        if int(node) in out:
            raise ValueError(f"voter {int(node)} is listed twice")
        out[int(node)] = address
    if not out:
        raise ValueError("no voters given (e.g. --voters 0@127.0.0.1:9093)")
    return out
