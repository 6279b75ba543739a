"""A CRD one release ahead of the operator (docs/versioning.md): fields the operator does not
know are dropped at the handler edge (Service.from_body), while the models stay strict."""

from __future__ import annotations

import pydantic
import pytest

from vllm_operator.api.spec import Service, VLLMServiceSpec


def body(spec: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": "a", "namespace": "n", "uid": "u", "generation": 3}, "spec": spec}


SPEC = {
    "model": {"id": "Qwen/Qwen2.5-0.5B-Instruct", "futureKnob": "x"},
    "futureBlock": {"mode": "Auto"},
    "env": [{"name": "A", "value": "b", "futureField": 2}],
    "benchmark": {"thresholds": {"futureGate": 1}},
}


def test_unknown_fields_at_every_depth_are_dropped_at_the_edge() -> None:
    svc = Service.from_body(body(SPEC))
    known = {k: v for k, v in SPEC.items() if k != "futureBlock"}
    known["model"] = {"id": "Qwen/Qwen2.5-0.5B-Instruct"}
    known["env"] = [{"name": "A", "value": "b"}]
    known["benchmark"] = {"thresholds": {}}
    assert svc.spec == VLLMServiceSpec.model_validate(known)


def test_the_models_themselves_still_refuse_unknown_fields() -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        VLLMServiceSpec.model_validate(SPEC)
    assert err.value.error_count() == 4
    assert {e["type"] for e in err.value.errors()} == {"extra_forbidden"}


def test_known_fields_keep_being_validated_at_the_edge() -> None:
    with pytest.raises(pydantic.ValidationError, match="replicas"):
        Service.from_body(body({**SPEC, "replicas": -1}))
