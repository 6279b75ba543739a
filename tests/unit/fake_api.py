"""An in-memory stand-in for the API server behind the real Writer, for unit tests of the
reconcile and the benchmark step: the Writer's own logic (covers, stamp, prune, status
replace) runs unchanged; only its one HTTP call is answered from a dict.

It keeps what a test needs to assert on: every request (method, path), the objects, and
denials it is told to answer with (code and message, as an admission policy would).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from kubernetes.client.exceptions import ApiException

from vllm_operator.api.settings import OperatorSettings
from vllm_operator.render.benchmark import revision
from vllm_operator.write.apply import Writer, _path

WRITES = ("PATCH", "DELETE", "POST", "PUT")


def _error(code: int, message: str) -> ApiException:
    return ApiException(status=code, reason="Error", body=json.dumps({"message": message}))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what the API server does with merge-patch+json)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _matches(obj: dict[str, Any], selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    pairs = [p.split("=", 1) for p in selector.split(",") if p]
    return all(labels.get(k) == v for k, v in pairs)


class FakeApi(Writer):
    def __init__(self, settings: OperatorSettings | None = None) -> None:
        super().__init__(None, settings or OperatorSettings())  # type: ignore[arg-type]
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.denials: dict[str, tuple[int, str]] = {}  # path fragment -> (code, message)
        self.read_denials: dict[str, tuple[int, str]] = {}  # the same, for GETs

    # ---- test helpers -------------------------------------------------------------------
    def put(self, path: str, obj: dict[str, Any]) -> None:
        self.objects[path] = copy.deepcopy(obj)

    def deny(self, fragment: str, code: int, message: str) -> None:
        """Writes to paths containing `fragment` are answered with `code` and `message`."""
        self.denials[fragment] = (code, message)

    def deny_reads(self, fragment: str, code: int, message: str) -> None:
        """Reads (GET) of paths containing `fragment` are answered with `code` and `message`
        (a 429 of API Priority and Fairness, a 5xx)."""
        self.read_denials[fragment] = (code, message)

    def writes_made(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] in WRITES]

    # ---- the one HTTP call ----------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        body: object = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        self.requests.append((method, path))
        if method in WRITES:
            for fragment, (code, message) in self.denials.items():
                if fragment in path:
                    raise _error(code, message)
        params = dict(query or [])
        if method == "GET":
            for fragment, (code, message) in self.read_denials.items():
                if fragment in path:
                    raise _error(code, message)
            if path in self.objects:
                return copy.deepcopy(self.objects[path])
            if "labelSelector" in params:
                return {
                    "items": [
                        copy.deepcopy(o)
                        for p, o in sorted(self.objects.items())
                        if p.rsplit("/", 1)[0] == path and _matches(o, params["labelSelector"])
                    ]
                }
            raise _error(404, "not found")
        if method == "DELETE":
            if self.objects.pop(path, None) is None:
                raise _error(404, "not found")
            return {}
        if method == "PATCH":
            return self._patch(path, body, content_type)
        raise AssertionError(f"unexpected {method} {path}")

    def _patch(self, path: str, body: object, content_type: str) -> dict[str, Any]:
        if path.endswith("/status"):
            obj = self.objects.get(path.removesuffix("/status"))
            if obj is None:
                raise _error(404, "not found")
            if content_type == "application/merge-patch+json":
                assert isinstance(body, dict)
                obj["status"] = merge_patch(obj.get("status"), body.get("status"))
                return copy.deepcopy(obj)
            assert content_type == "application/json-patch+json", content_type
            for op in body:  # type: ignore[attr-defined]
                assert op["op"] == "add", op
                assert op["path"] == "/status", op
                obj["status"] = copy.deepcopy(op["value"])
            return copy.deepcopy(obj)
        if content_type == "application/apply-patch+yaml":
            new = copy.deepcopy(body)
            assert isinstance(new, dict)
            old = self.objects.get(path)
            new["metadata"].setdefault("uid", f"uid-{len(self.objects)}")
            new["metadata"].setdefault(
                "creationTimestamp", f"2030-01-01T00:{len(self.objects):02d}:00Z"
            )
            if old is not None:
                new["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"]
                new["metadata"]["uid"] = old["metadata"]["uid"]
                if "status" in old:
                    new["status"] = old["status"]
            self.objects[path] = new
            return copy.deepcopy(new)
        if content_type == "application/merge-patch+json":
            obj = self.objects.get(path)
            if obj is None:
                raise _error(404, "not found")
            assert isinstance(body, dict)
            self.objects[path] = merge_patch(obj, body)
            return copy.deepcopy(self.objects[path])
        raise AssertionError(f"unexpected patch {content_type} {path}")


def rolled_out(api: FakeApi, namespace: str = "ns", name: str = "minimal") -> None:
    """What the Deployment controller and the kubelet report once the rollout finished: the
    Deployment's status and a Ready pod of its current ReplicaSet (the one a run measures)."""
    dep = api.objects[_path("apps/v1", "Deployment", namespace, name)]
    want = dep["spec"]["replicas"]
    dep["metadata"]["generation"] = 1
    dep["status"] = {
        "observedGeneration": 1,
        "replicas": want,
        "updatedReplicas": want,
        "readyReplicas": want,
        "availableReplicas": want,
    }
    selector = dep["spec"]["selector"]["matchLabels"]
    for path in [p for p in api.objects if f"/namespaces/{namespace}/pods/" in p]:
        pod_labels = api.objects[path]["metadata"].get("labels") or {}
        if all(pod_labels.get(k) == v for k, v in selector.items()):  # (not a canary's)
            del api.objects[path]
    pod_hash = revision(dep["spec"]["template"])[:8]
    pod = f"{name}-{pod_hash}-x1"
    labels = dict(dep["spec"]["template"]["metadata"]["labels"])
    api.put(
        _path("v1", "Pod", namespace, pod),
        {
            "metadata": {
                "name": pod,
                "namespace": namespace,
                "uid": f"pod-{pod_hash}",
                "creationTimestamp": "2030-01-01T00:00:00Z",
                "labels": {**labels, "pod-template-hash": pod_hash},
                "ownerReferences": [
                    {"kind": "ReplicaSet", "name": f"{name}-{pod_hash}", "controller": True}
                ],
            },
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.9",
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )


def publish(api: FakeApi, run: str, tps: float, namespace: str = "ns") -> None:
    """Run `run`'s Job publishes a result (headline tok/s `tps`) and succeeds."""
    cm = api.objects[_path("v1", "ConfigMap", namespace, run)]
    cm["data"]["result.json"] = json.dumps(
        {"status": "ok", "headline": {"outputTokensPerSecond": tps}}
    )
    api.objects[_path("batch/v1", "Job", namespace, run)]["status"] = {"succeeded": 1}
