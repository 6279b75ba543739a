"""Step 1 of the flow (spec): the version-skew filter: a body's fields that this operator's
models do not know (a newer CRD's) dropped at the handler edge, before the strict models
parse it."""

from __future__ import annotations

import typing
from collections.abc import Mapping

from pydantic import BaseModel


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (X, X | None, list[X], dict[str, X])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def known_fields(model: type[BaseModel], data: object) -> object:
    """`data` without the keys `model` does not know, recursively.

    At the handler edge the API server has already validated the object against the installed
    CRD, which may be newer than this operator (during an upgrade, or after an operator
    rollback): a field added by the next release, and defaulted by its CRD, then reaches this
    operator, and extra="forbid" would turn every service InvalidSpec (docs/versioning.md).
    The models themselves stay strict, for every other caller."""
    if not isinstance(data, Mapping):
        return data
    fields = {(f.alias or n): f for n, f in model.model_fields.items()}
    fields.update(dict(model.model_fields.items()))
    out: dict[str, object] = {}
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            continue
        nested = _models_in(field.annotation)
        if len(nested) == 1 and isinstance(value, Mapping):
            out[key] = known_fields(nested[0], value)
        elif len(nested) == 1 and isinstance(value, list):
            out[key] = [known_fields(nested[0], v) for v in value]
        else:
            out[key] = value
    return out
