"""A minimal DNS A query over UDP, to check from the host that the cluster's DNS answers
(``kubernetes.default.svc.cluster.local`` must resolve to the API Service's address). Building
and parsing the packets are pure functions; :func:`resolve_a` does the one exchange.
"""

from __future__ import annotations

import secrets
import socket
import struct

TYPE_A = 1
CLASS_IN = 1


class DnsError(RuntimeError):
    pass


def query(name: str, qid: int) -> bytes:
    """A recursive-desired query for ``name``'s A records."""
    header = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    labels = b"".join(bytes([len(p)]) + p.encode("ascii") for p in name.strip(".").split("."))
    return header + labels + b"\x00" + struct.pack("!HH", TYPE_A, CLASS_IN)


def _skip_name(data: bytes, pos: int) -> int:
    while True:
        if pos >= len(data):
            raise DnsError("truncated name")
        length = data[pos]
        if length & 0xC0 == 0xC0:
            return pos + 2
        if length == 0:
            return pos + 1
        pos += 1 + length


def parse_a(data: bytes, qid: int) -> list[str]:
    """The IPv4 addresses in a response to query ``qid``; :class:`DnsError` on an error code."""
    if len(data) < 12:
        raise DnsError("short response")
    rid, flags, qd, an, _ns, _ar = struct.unpack("!HHHHHH", data[:12])
    if rid != qid:
        raise DnsError(f"response id {rid} does not match query id {qid}")
    rcode = flags & 0x000F
    if rcode != 0:
        raise DnsError(f"rcode {rcode}")
    pos = 12
    for _ in range(qd):
        pos = _skip_name(data, pos) + 4
    out = []
    for _ in range(an):
        pos = _skip_name(data, pos)
        rtype, _rclass, _ttl, rdlen = struct.unpack("!HHIH", data[pos:pos + 10])
        pos += 10
        if rtype == TYPE_A and rdlen == 4:
            out.append(socket.inet_ntoa(data[pos:pos + 4]))
        pos += rdlen
    return out


def resolve_a(server: str, name: str, timeout: float = 2.0) -> list[str]:
    qid = secrets.randbelow(0xFFFF)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(query(name, qid), (server, 53))
        data, _ = sock.recvfrom(4096)
    return parse_a(data, qid)
