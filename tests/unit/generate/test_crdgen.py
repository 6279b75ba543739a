"""The CRD generated from api/spec.py is a structural Kubernetes schema, documents every field and
matches the committed crds/vllmservices.yaml."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from vllm_localenv.cluster import REPO_ROOT
from vllm_operator.generate import crd as crdgen

CRD_FILE = REPO_ROOT / "crds" / "vllmservices.yaml"
FORBIDDEN_KEYS = ("$ref", "$defs", "anyOf", "title")


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    return crdgen.crd()


@pytest.fixture(scope="module")
def version(crd: dict[str, Any]) -> dict[str, Any]:
    (only,) = crd["spec"]["versions"]
    return only


@pytest.fixture(scope="module")
def spec_schema(version: dict[str, Any]) -> dict[str, Any]:
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def keys_anywhere(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, key) of every mapping key in a nested dict/list structure."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key
            yield from keys_anywhere(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from keys_anywhere(value, f"{path}[{i}]")


def schema_nodes(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node below `node`: properties, list items and map values."""
    for name, prop in node.get("properties", {}).items():
        yield f"{path}.{name}", prop
        yield from schema_nodes(prop, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield f"{path}[]", node["items"]
        yield from schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield f"{path}{{}}", node["additionalProperties"]
        yield from schema_nodes(node["additionalProperties"], f"{path}{{}}")


def properties(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Only the named properties (the fields `kubectl explain` lists)."""
    for where, prop in schema_nodes(node, path):
        if not where.endswith(("[]", "{}")):
            yield where, prop


def test_no_json_schema_only_keywords(crd: dict[str, Any]) -> None:
    found = [f"{path}: {key}" for path, key in keys_anywhere(crd) if key in FORBIDDEN_KEYS]
    assert not found, "keywords a structural schema must not carry:\n" + "\n".join(found)


def test_every_spec_node_has_a_type(spec_schema: dict[str, Any]) -> None:
    assert spec_schema["type"] == "object"
    untyped = [
        path
        for path, node in schema_nodes(spec_schema, "spec")
        if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields")
    ]
    assert not untyped, f"schema nodes without a type: {untyped}"


def test_every_spec_property_is_described(spec_schema: dict[str, Any]) -> None:
    assert spec_schema.get("description", "").strip()
    missing = [
        path
        for path, node in properties(spec_schema, "spec")
        if not str(node.get("description", "")).strip()
    ]
    assert not missing, f"fields without a description (kubectl explain shows none): {missing}"


def test_the_walk_sees_nested_fields(spec_schema: dict[str, Any]) -> None:
    """Guards the two tests above against a walk that silently visits nothing."""
    paths = {path for path, _ in properties(spec_schema, "spec")}
    assert {
        "spec.engine.gpuMemoryUtilization",
        "spec.model.pvc.claimName",
        "spec.autoscaling.metricName",
    } <= paths
    assert "spec.env[]" in {path for path, _ in schema_nodes(spec_schema, "spec")}


def test_committed_crd_matches_the_generator() -> None:
    assert CRD_FILE.read_text() == crdgen.render_yaml(), (
        f"{CRD_FILE.relative_to(REPO_ROOT)} is out of date with "
        "operator/vllm_operator/api/spec.py; "
        "run `make generate` (python -m vllm_operator.generate.crd crds/vllmservices.yaml) and "
        "commit the result"
    )


def test_printer_columns(version: dict[str, Any]) -> None:
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert {"Ready", "Replicas", "Model", "Age"} <= set(names)
    age = next(c for c in version["additionalPrinterColumns"] if c["name"] == "Age")
    assert age == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def test_scale_and_status_subresources(version: dict[str, Any]) -> None:
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }


def test_names(crd: dict[str, Any]) -> None:
    names = crd["spec"]["names"]
    assert names["kind"] == "VLLMService"
    assert names["plural"] == "vllmservices"
    assert names["shortNames"] == ["vsvc"]
    assert crd["metadata"]["name"] == "vllmservices.serving.vllm-operator.dev"
