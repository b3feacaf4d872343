"""Kubernetes resource quantities (``10Gi``, ``500m``, ``1.5e3``) as exact numbers.

Used to compare storage sizes (growth is allowed, shrinking is not) the way the API server's CEL
``quantity()`` library does.
"""

from __future__ import annotations

import re
from fractions import Fraction

#: The quantity grammar accepted by the API server (anchored), also used in the CRD schema.
QUANTITY_PATTERN = (
    r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$"
)

_SUFFIX = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}

_RE = re.compile(
    r"^\+?(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<suffix>[eE][-+]?[0-9]+|[KMGTPE]i|[mkMGTPE])?$"
)


def parse_quantity(text: str | int) -> Fraction:
    """The exact value of a quantity; raises ValueError naming the bad text."""
    if isinstance(text, int):
        return Fraction(text)
    m = _RE.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. 10Gi, 500Mi, 1T)")
    num = Fraction(m.group("num"))
    suffix = m.group("suffix") or ""
    if suffix[:1] in ("e", "E") and suffix not in _SUFFIX:
        return num * Fraction(10) ** int(suffix[1:])
    return num * _SUFFIX[suffix]


def is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except ValueError:
        return False
    return True
