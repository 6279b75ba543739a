"""Generates the VLLMService CRD from the pydantic models in api/spec.py and api/status_schema.py.

`python -m vllm_operator.generate.crd` writes crds/vllmservices.yaml (and the chart's copy);
CI regenerates it and fails when the committed file drifts.

pydantic's JSON Schema is not a structural Kubernetes schema: this inlines every $ref, turns
Optional[...] (anyOf with null) into a plain optional property, maps free-form JSON to
x-kubernetes-preserve-unknown-fields, converts JSON-Schema-2020 exclusive bounds to the
OpenAPI v3.0 form, drops titles, and adds `default: {}` to optional nested objects so the API
server fills in their fields' defaults.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from vllm_operator import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from vllm_operator.api.cel import cel
from vllm_operator.api.spec import DNS_LABEL, MAX_NAME_LENGTH, VLLMServiceSpec
from vllm_operator.api.status_schema import VLLMServiceStatus

Schema = dict[str, Any]
_KEEP = {
    "type",
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "format",
    "required",
    "properties",
    "items",
    "additionalProperties",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-preserve-unknown-fields",
}


def _is_any(node: Schema) -> bool:
    return not any(k in node for k in ("type", "properties", "items", "enum", "anyOf", "$ref"))


def structural(node: Schema, defs: dict[str, Schema]) -> Schema:  # noqa: PLR0912
    """One pydantic schema node -> a structural Kubernetes schema node."""
    node = copy.deepcopy(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[1]]
        merged = {**target, **node}  # the property's own description wins
        return structural(merged, defs)
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {options} structurally")
        if node.get("default", "") is None:
            del node["default"]  # "unset" is expressed by omitting the field
        return structural({**options[0], **node}, defs)
    if _is_any(node) or node.get("title") == "JsonValue":
        out: Schema = {"x-kubernetes-preserve-unknown-fields": True}
        if "description" in node:
            out["description"] = node["description"]
        return out
    if "exclusiveMinimum" in node:
        node["minimum"] = node.pop("exclusiveMinimum")
        node["exclusiveMinimum"] = True
    if "exclusiveMaximum" in node:
        node["maximum"] = node.pop("exclusiveMaximum")
        node["exclusiveMaximum"] = True
    if "const" in node:
        node["enum"] = [node.pop("const")]
    out = {k: v for k, v in node.items() if k in _KEEP or k.startswith("exclusive")}
    if "enum" in out and "type" not in out:
        out["type"] = "integer" if all(isinstance(v, int) for v in out["enum"]) else "string"
    if "properties" in out:
        out["type"] = "object"
        out["properties"] = {k: structural(v, defs) for k, v in out["properties"].items()}
    if "items" in out:
        out["items"] = structural(out["items"], defs)
    if isinstance(out.get("additionalProperties"), dict):
        inner = structural(out["additionalProperties"], defs)
        if inner.get("x-kubernetes-preserve-unknown-fields"):
            out.pop("additionalProperties")
            out["x-kubernetes-preserve-unknown-fields"] = True
        else:
            out["additionalProperties"] = inner
    elif out.get("additionalProperties") is False:
        out.pop("additionalProperties")  # structural schemas prune unknown fields anyway
    return out


def _factory_defaults(model: type[BaseModel], schema: Schema) -> None:
    """Nested objects built by a default_factory get that object's full default, so the API
    server fills them in (and their CEL rules see every field) when the user omits them."""
    for name, info in model.model_fields.items():
        prop = schema.get("properties", {}).get(info.alias or name)
        if prop is None:
            continue
        factory = info.default_factory
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            prop["default"] = factory().model_dump(by_alias=True, exclude_none=True, mode="json")
        nested = info.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            _factory_defaults(nested, prop)


def _schema(model: type[BaseModel]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    out = structural(raw, raw.pop("$defs", {}))
    _factory_defaults(model, out)
    return out


def crd() -> dict[str, Any]:
    spec = _schema(VLLMServiceSpec)
    status = _schema(VLLMServiceStatus)
    ready = '.status.conditions[?(@.type=="Ready")].status'
    root: Schema = {
        "type": "object",
        "description": "A vLLM OpenAI-compatible deployment: GPU pods, a Service, autoscaling.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [
            cel(
                f"self.metadata.name.size() <= {MAX_NAME_LENGTH}",
                f"metadata.name must be at most {MAX_NAME_LENGTH} characters so that every "
                "child name fits in 63",
            ),
            cel(
                f"self.metadata.name.matches('{DNS_LABEL}')",
                "metadata.name must be a DNS label (lower-case letters, digits and '-', "
                "starting with a letter; no dots): the Service and the other children take it",
            ),
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "listKind": f"{KIND}List",
                # not "all": `kubectl delete all --all` must not delete the services
                "categories": ["vllm"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Ready", "type": "string", "jsonPath": ready},
                        {
                            "name": "Replicas",
                            "type": "integer",
                            "jsonPath": ".status.readyReplicas",
                            "description": "Ready replicas",
                        },
                        {
                            "name": "Desired",
                            "type": "integer",
                            "jsonPath": ".status.desiredReplicas",
                            "priority": 1,
                        },
                        {"name": "Model", "type": "string", "jsonPath": ".status.model"},
                        {
                            "name": "GPUs",
                            "type": "integer",
                            "jsonPath": ".spec.resources.gpus",
                            "description": "GPUs per pod (0: served on CPU)",
                            "priority": 1,
                        },
                        {
                            "name": "Endpoint",
                            "type": "string",
                            "jsonPath": ".status.endpoint",
                            "priority": 1,
                        },
                        {
                            "name": "Tok/s",
                            "type": "number",
                            "jsonPath": ".status.benchmark.outputTokensPerSecond",
                            "description": "Benchmarked output tokens/s of the latest revision",
                        },
                        {
                            "name": "TTFT-p95",
                            "type": "number",
                            "jsonPath": ".status.benchmark.ttftP95Seconds",
                        },
                        {"name": "Bench", "type": "string", "jsonPath": ".status.benchmark.state"},
                        {"name": "Rollout", "type": "string", "jsonPath": ".status.rollout.phase"},
                        {
                            "name": "Capacity",
                            "type": "number",
                            "jsonPath": ".status.capacity.concurrencyPerPod",
                            "description": "Requests at once per pod within spec.objective "
                            "(the serving revision's, measured)",
                        },
                        {
                            "name": "Scale-Target",
                            "type": "string",
                            "jsonPath": ".status.autoscaling.targetAverageValue",
                            "description": "The HPA's per-pod target (policy: "
                            ".status.autoscaling.policy)",
                        },
                        {
                            "name": "Load",
                            "type": "number",
                            "jsonPath": ".status.startup.last.loadSeconds",
                            "description": "The last pod start, created to Ready (seconds; "
                            "its phases: .status.startup.last)",
                        },
                        {
                            "name": "Passed",
                            "type": "string",
                            "priority": 1,
                            "jsonPath": '.status.conditions[?(@.type=="BenchmarkPassed")].status',
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
            ],
        },
    }


HEADER = (
    "# Generated by `make generate` (python -m vllm_operator.generate.crd) from api/spec.py."
    " Do not edit.\n"
)


def render_yaml() -> str:
    return HEADER + yaml.safe_dump(crd(), sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    targets = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    text = render_yaml()
    for target in targets or [Path("crds/vllmservices.yaml")]:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
