"""Step 1 of the flow (spec): Kubernetes resource quantities: the schema's syntax (a field
type of the models) and the exact parser that CEL's quantity() mirrors."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Annotated

from pydantic import Field

# "A resource quantity": the API server's own syntax, checked again by CEL's quantity().
# The API server's own quantity syntax (resource.Quantity), without a sign: no child takes a
# negative size, and "1.2.3" or "-8Gi" would pass the schema only to fail on the Deployment.
# Kubernetes' quantity pattern, with the decimal exponent bounded to two digits (a quantity
# holds at most 2^63-1, about 9.2e18: no real one needs more; "9e999999999999" is refused by
# the API server instead of being computed)
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]{1,2}))?$"
)

Quantity = Annotated[str, Field(max_length=32, pattern=QUANTITY_PATTERN)]

_QUANTITY_SUFFIXES: dict[str, Fraction] = {
    **{s: Fraction(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: Fraction(1000) ** (i + 1) for i, s in enumerate(("k", "M", "G", "T", "P", "E"))},
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "u": Fraction(1, 1000**2),
    "n": Fraction(1, 1000**3),
}
_QUANTITY_RE = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))$"
)


# The bounds of the parser: a quantity's text is at most this long, and its decimal exponent at
# most this large either way. Kubernetes' own quantities hold at most 2^63-1 (about 9.2e18)
# of their unit and round anything non-zero below 1n up to 1n; these bounds are far beyond
# that, and keep the exact arithmetic cheap: "7e65125782" would otherwise be computed as a
# 65-million-digit number (minutes of one CPU, every service of the cluster stalled).
QUANTITY_MAX_LENGTH = 64
QUANTITY_MAX_EXPONENT = 99


def parse_quantity(value: str) -> Fraction:
    """A Kubernetes resource quantity ("1Gi", "500M", "1.5", "2e3") as an exact number; what
    CEL's quantity() reads, for the pydantic mirrors of rules that compare quantities.
    Bounded: a text longer than QUANTITY_MAX_LENGTH or a decimal exponent beyond
    ±QUANTITY_MAX_EXPONENT is refused (ValueError) before any arithmetic."""
    if len(value) > QUANTITY_MAX_LENGTH:
        raise ValueError(
            f"{value[:QUANTITY_MAX_LENGTH]!r}... is not a resource quantity: longer than "
            f"{QUANTITY_MAX_LENGTH} characters"
        )
    match = _QUANTITY_RE.match(value)
    if match is None or (match.group(3) or "") not in _QUANTITY_SUFFIXES:
        raise ValueError(f"{value!r} is not a resource quantity")
    number = Fraction(match.group(1))
    if match.group(2):
        exponent = int(match.group(2)[1:])
        if abs(exponent) > QUANTITY_MAX_EXPONENT:
            raise ValueError(
                f"{value!r} is out of the range of a resource quantity: its exponent is "
                f"beyond ±{QUANTITY_MAX_EXPONENT} (Kubernetes holds at most 2^63-1)"
            )
        return number * Fraction(10) ** exponent
    return number * _QUANTITY_SUFFIXES[match.group(3) or ""]
