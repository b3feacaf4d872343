"""Errors the model raises: every one names the field (as a JSON path) and says how to fix it.

The reconcilers copy these messages verbatim into the resource's status conditions and events, so
they are written for the person who applied the YAML, not for the operator's developers.
"""

from __future__ import annotations

import dataclasses

from strom.model import reassign


@dataclasses.dataclass(frozen=True)
class FieldError:
    """One problem with one field, e.g. ``spec.brokers.replicas: must be >= 1, got 0``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SpecError(ValueError):
    """A spec that can not be reconciled as written; ``errors`` lists every problem found."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))


#: The planner's refusal (e.g. fewer brokers than the replication factor): the one planner is
#: ``strom.model.reassign``, shared with ``strom reassign plan``.
PlanError = reassign.PlanError
