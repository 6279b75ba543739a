"""Bodies and Services for the pure unit tests, built from the committed samples."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from vllm_operator.api.spec import Service

SAMPLES = Path(__file__).resolve().parents[2] / "crds" / "samples"


def deep_merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` merged in (nested dicts merge, anything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def body(sample: str = "minimal", spec: dict[str, Any] | None = None, generation: int = 1) -> dict:
    """A custom resource as the operator receives it: the sample plus namespace, uid and
    generation, with `spec` merged into the sample's spec."""
    doc = yaml.safe_load((SAMPLES / f"{sample}.yaml").read_text())
    doc["metadata"].update(namespace="ns", uid="uid-1", generation=generation)
    doc["spec"] = deep_merge(doc["spec"], spec or {})
    return doc


def service(sample: str = "minimal", spec: dict[str, Any] | None = None, generation: int = 1):
    return Service.from_body(body(sample, spec, generation))
