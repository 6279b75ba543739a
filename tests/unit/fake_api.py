"""An in-memory stand-in for the API server behind the real Writer, for unit tests of the
reconcile and the benchmark step: the Writer's own logic (covers, stamp, prune, status
replace) runs unchanged; only its one HTTP call is answered from a dict.

Its server-side apply behaves like the API server's where the operator's logic depends on it:

- field ownership: each field manager's applied configuration is kept; an apply replaces
  only what that manager applied before (a field it no longer sets is removed unless another
  manager set it; fields written by others, e.g. the HPA's spec.replicas, stay), and
  metadata.managedFields says who owns what (Apply and Update entries, fieldsV1);
- omitempty: a `""` string, a null and an empty list are not stored (an env var's or a
  toleration's `value: ""` reads back without the key);
- defaulting: the defaults the API server adds to what the operator renders (a container's
  imagePullPolicy and terminationMessagePath, a port's protocol, a Deployment's
  revisionHistoryLimit and progressDeadlineSeconds, a pod's restartPolicy, dnsPolicy and
  schedulerName), so a comparison that mistook a default for drift would show.
Lists of named items (containers, env, volumes, ports) merge by name, as their merge keys do;
other lists are atomic. What it does not model: conflicts (the operator always forces).

It keeps what a test needs to assert on: every request (method, path), the objects, and
denials it is told to answer with (code and message, as an admission policy would).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from kubernetes.client.exceptions import ApiException

from vllm_operator.api.settings import OperatorSettings
from vllm_operator.render.benchmark import REVISION_ANNOTATION, revision
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


OMITTED = (None, "", [])  # what `omitempty` drops from a struct's fields
# string maps (map[string]string): their entries are kept whatever their value ("" included)
MAPS = frozenset(
    {"data", "binaryData", "stringData", "labels", "annotations", "nodeSelector", "matchLabels"}
)


def _omit_empty(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {
            k: v if k in MAPS and isinstance(v, dict) else _omit_empty(v) for k, v in value.items()
        }
        return {k: v for k, v in kept.items() if v not in OMITTED}
    if isinstance(value, list):
        return [_omit_empty(v) for v in value]
    return value


def _named(items: Any) -> bool:
    return isinstance(items, list) and all(isinstance(i, dict) and "name" in i for i in items)


def _merge(base: Any, applied: Any) -> Any:
    """`applied` over `base`: maps merge, lists of named items merge by name, the rest is
    replaced."""
    if isinstance(base, dict) and isinstance(applied, dict):
        out = copy.deepcopy(base)
        for k, v in applied.items():
            out[k] = _merge(out.get(k), v)
        return out
    if _named(base) and _named(applied) and base and applied:
        by_name = {i["name"]: i for i in base}
        out_list = [_merge(by_name.pop(i["name"], None), i) for i in applied]
        return [i for i in base if i["name"] in by_name] + out_list
    return copy.deepcopy(applied)


def _without(obj: Any, owned: Any, keep: Any) -> Any:
    """`obj` less the fields `owned` (a manager's earlier applied configuration) set, except
    those `keep` (every other manager's configuration, merged) sets too."""
    if isinstance(obj, dict) and isinstance(owned, dict):
        out = {}
        keep_d = keep if isinstance(keep, dict) else {}
        for k, v in obj.items():
            if k not in owned:
                out[k] = v
            elif k in keep_d:
                out[k] = _without(v, owned[k], keep_d[k]) if isinstance(v, dict | list) else v
            elif isinstance(v, dict) and isinstance(owned[k], dict) and owned[k]:
                rest = _without(v, owned[k], None)
                if rest:
                    out[k] = rest
            elif _named(v) and _named(owned[k]):
                names = {i["name"] for i in owned[k]}
                rest_list = [i for i in v if i["name"] not in names]
                if rest_list:
                    out[k] = rest_list
        return out
    if _named(obj) and _named(owned):
        keep_names = {i["name"] for i in keep} if _named(keep) else set()
        names = {i["name"] for i in owned}
        return [i for i in obj if i["name"] not in names or i["name"] in keep_names]
    return obj


def fields_v1(value: Any) -> dict[str, Any]:
    """The fieldsV1 set of a configuration (what metadata.managedFields records)."""
    if not isinstance(value, dict):
        return {}
    out: dict[str, Any] = {}
    for k, v in value.items():
        if _named(v) and v:
            out[f"f:{k}"] = {f'k:{{"name":"{i["name"]}"}}': {".": {}, **fields_v1(i)} for i in v}
        else:
            out[f"f:{k}"] = fields_v1(v)
    return out


def _pod_defaults(pod_spec: dict[str, Any]) -> None:
    pod_spec.setdefault("restartPolicy", "Always")
    pod_spec.setdefault("dnsPolicy", "ClusterFirst")
    pod_spec.setdefault("schedulerName", "default-scheduler")
    pod_spec.setdefault("terminationGracePeriodSeconds", 30)
    for c in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
        image = str(c.get("image", ""))
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        for port in c.get("ports", []):
            port.setdefault("protocol", "TCP")


def defaulted(obj: dict[str, Any]) -> dict[str, Any]:
    """The defaults the API server adds to the kinds the operator renders (a subset: those
    that touch fields the operator sets)."""
    kind, spec = obj.get("kind"), obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    if kind == "Deployment":
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault("replicas", 1)
    if kind in ("Deployment", "Job") and isinstance(spec.get("template", {}).get("spec"), dict):
        _pod_defaults(spec["template"]["spec"])
    if kind == "Service":
        for port in spec.get("ports", []):
            port.setdefault("protocol", "TCP")
    return obj


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
        self.applied: dict[str, dict[str, Any]] = {}  # path -> manager -> applied config

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
            return self._patch(path, body, content_type, params.get("fieldManager", ""))
        raise AssertionError(f"unexpected {method} {path}")

    def update_by(self, manager: str, path: str, patch: dict[str, Any]) -> None:
        """Another client's update (a merge patch with its own field manager): the HPA's scale,
        `kubectl scale`, a person's edit. It owns the fields it set from then on."""
        self._patch(path, patch, "application/merge-patch+json", manager)

    def _managed_fields(self, path: str, updates: dict[str, Any]) -> list[dict[str, Any]]:
        entries = [
            {"manager": m, "operation": "Apply", "fieldsV1": fields_v1(cfg)}
            for m, cfg in sorted(self.applied.get(path, {}).items())
        ]
        return entries + [
            {"manager": m, "operation": "Update", "fieldsV1": fields_v1(cfg)}
            for m, cfg in sorted(updates.items())
        ]

    def _bump(self, obj: dict[str, Any]) -> None:
        """A write's new metadata.resourceVersion (one counter for all objects, as etcd's)."""
        self._version = getattr(self, "_version", 0) + 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)

    def _server_side_apply(self, path: str, body: dict[str, Any], manager: str) -> dict[str, Any]:
        applied = _omit_empty(copy.deepcopy(body))
        old = self.objects.get(path)
        # a resourceVersion in the applied configuration is a precondition, not a field
        want = applied.get("metadata", {}).pop("resourceVersion", None)
        have = (old or {}).get("metadata", {}).get("resourceVersion")
        if want is not None and old is not None and want != have:
            raise _error(
                409,
                "Operation cannot be fulfilled: the object has been modified; please apply "
                "your changes to the latest version and try again",
            )
        mine = self.applied.setdefault(path, {})
        others: Any = {}  # what every other manager set (applied, or by an update)
        for m, cfg in [*mine.items(), *self._updates.get(path, {}).items()]:
            if m != manager:
                others = _merge(others, cfg)
        base = copy.deepcopy(old) if old is not None else {}
        base.get("metadata", {}).pop("managedFields", None)
        if manager in mine:
            base = _without(base, mine[manager], others)
        new = defaulted(_merge(base, applied))
        mine[manager] = applied
        new["metadata"].setdefault("uid", f"uid-{len(self.objects)}")
        new["metadata"].setdefault(
            "creationTimestamp", f"2030-01-01T00:{len(self.objects):02d}:00Z"
        )
        if old is not None:
            new["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            new["metadata"]["uid"] = old["metadata"]["uid"]
            if "status" in old:
                new["status"] = old["status"]
        new["metadata"]["managedFields"] = self._managed_fields(path, self._updates.get(path, {}))
        self._bump(new)
        self.objects[path] = new
        return copy.deepcopy(new)

    @property
    def _updates(self) -> dict[str, dict[str, Any]]:
        if not hasattr(self, "_update_cfgs"):
            self._update_cfgs: dict[str, dict[str, Any]] = {}
        return self._update_cfgs

    def _patch(
        self, path: str, body: object, content_type: str, manager: str = ""
    ) -> dict[str, Any]:
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
            assert isinstance(body, dict)
            assert manager, "server-side apply needs a fieldManager"
            return self._server_side_apply(path, body, manager)
        if content_type == "application/merge-patch+json":
            obj = self.objects.get(path)
            if obj is None:
                raise _error(404, "not found")
            assert isinstance(body, dict)
            new = defaulted(merge_patch(obj, body))
            if manager:  # an update records who set what (managedFields)
                updates = self._updates.setdefault(path, {})
                updates[manager] = _merge(updates.get(manager, {}), body)
                new["metadata"]["managedFields"] = self._managed_fields(path, updates)
            self._bump(new)
            self.objects[path] = new
            return copy.deepcopy(new)
        raise AssertionError(f"unexpected patch {content_type} {path}")


def template_revision(deployment: dict[str, Any]) -> str:
    """The revision of the pod template the operator last applied to `deployment` (its
    annotation, written from the rendered template; the live template carries the API
    server's defaults besides, so its own hash is not the rendered one's)."""
    return str(deployment["metadata"]["annotations"][REVISION_ANNOTATION])


def applied(api: FakeApi, path: str, manager: str = "vllm-operator") -> dict[str, Any]:
    """What `manager` last applied to `path` (its configuration, as stored: without the
    defaults and the empty values the API server drops)."""
    return copy.deepcopy(api.applied[path][manager])


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
    pod_hash = revision(dep["spec"]["template"])[:8]  # (a pod-template-hash: any stable value)
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
