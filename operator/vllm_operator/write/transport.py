"""Transport and reads: the operator's one HTTP client to the Kubernetes API.

Every request of the operator goes through `Kube._call` (or `Kube.watch`, its streaming
twin): the one place that counts calls by verb (vllm_operator_api_requests_total), fences
writes (`fence`, set by leader election: a replica that may not write raises before the
request leaves the process) and keeps the watch cache current with what the operator itself
wrote. Reads of the kinds the watch cache holds are served from it where a stale answer is
safe (see `CACHED_GETS`). apply.Writer inherits all of this and adds the writes.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vllm_operator import API_VERSION, PLURAL, metrics
from vllm_operator.api.settings import OperatorSettings

log = logging.getLogger("vllm_operator")

PLURALS = {
    ("apps/v1", "Deployment"): "deployments",
    ("v1", "Service"): "services",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "horizontalpodautoscalers",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("batch/v1", "Job"): "jobs",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("v1", "Pod"): "pods",
    ("discovery.k8s.io/v1", "EndpointSlice"): "endpointslices",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrules",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitors",
    (API_VERSION, "VLLMService"): PLURAL,
}


class ApplyError(RuntimeError):
    """The API server refused a request (a denied or failed write, a failed read): the
    server's message, and its HTTP status code. `permanent` when the same request can never
    succeed for this spec (400/422 on a child); the reconcile still reports it in the status
    and retries with back-off, since an admission policy or a quota can change. `kind` and
    `name`: the object written, where one was (the reconcile reports a refusal on the
    condition of what that object is for). `reason`: the condition reason it is reported
    with."""

    reason = "ApplyFailed"

    def __init__(
        self,
        message: str,
        *,
        permanent: bool,
        code: int | None = None,
        kind: str = "",
        name: str = "",
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.code = code
        self.kind = kind
        self.name = name


class ReadError(ApplyError):
    """A read failed (a 429, a 5xx, a refused get or list): nothing was written, and what
    the children look like is unknown, not changed."""

    reason = "ReadFailed"


class NotOwnedError(ApplyError):
    """An object of a child's name exists and is not this service's (no owner reference to
    it): the operator does not write over it, nor make it a child to be garbage-collected."""

    reason = "NotOwned"


KINDS = {(api_version, plural): kind for (api_version, kind), plural in PLURALS.items()}

# Kinds whose single-object reads (`Kube.get`) come from the watch cache when it holds them.
# Safe because every write the operator makes from such a read is a server-side apply of what
# the spec renders, compared with the cached object only to skip a write that changes
# nothing: a stale object either costs one idempotent apply, or skips a write whose need the
# watch event that follows (it enqueues the service) brings back at once. Not cached, read
# fresh: the VLLMService itself (the spec and the old status everything is decided against),
# the Deployment (its live replica count, the HPA's choice, is written back into the
# rendering: a stale count would undo a scale), and ConfigMaps (the benchmark step re-reads a
# run's ConfigMap on purpose before it calls a run empty or superseded). Lists
# (`list_children`) of every kind the cache holds come from it: the callers that must not
# act on a stale list read the object again (above).
CACHED_GETS = frozenset(
    {
        ("v1", "Service"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("policy/v1", "PodDisruptionBudget"),
        ("batch/v1", "Job"),
    }
)


class ReadCache(Protocol):
    """What Kube needs of the watch cache (informer.Cache)."""

    def lookup(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> tuple[bool, dict[str, Any] | None]:
        """(True, the object or None) when a synced watch covers the kind and namespace;
        (False, None) when the cache cannot answer (a read must go to the API server)."""

    def select(
        self, api_version: str, kind: str, namespace: str, selector: str
    ) -> list[dict[str, Any]] | None:
        """The objects matching an equality `selector`; None when the cache cannot answer."""

    def written(self, obj: dict[str, Any]) -> None:
        """The API server's answer to a write of the operator (newer than the cache)."""

    def removed(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """The operator deleted the object."""


def _path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    where = f"/namespaces/{namespace}" if namespace else ""
    path = f"{base}{where}/{PLURALS[(api_version, kind)]}"
    return f"{path}/{name}" if name else path


def parse_path(path: str) -> tuple[str, str | None, str | None, str | None]:
    """(api_version, namespace, plural, name) of a resource path; plural None for discovery.
    `/apis/apps/v1/namespaces/ns/deployments/x` -> ("apps/v1", "ns", "deployments", "x")."""
    parts = path.split("?", maxsplit=1)[0].strip("/").split("/")
    if parts[0] == "api":
        api_version, rest = parts[1] if len(parts) > 1 else "", parts[2:]
    else:
        api_version, rest = "/".join(parts[1:3]), parts[3:]
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0] if rest else None
    name = rest[1] if len(rest) > 1 else None
    return api_version, namespace, plural, name


def verb(method: str, path: str, query: list[tuple[str, str]] | None = None) -> str:
    """The Kubernetes verb of a request (as the audit log names it)."""
    if method == "GET":
        if any(k == "watch" and v in ("1", "true") for k, v in query or []):
            return "watch"
        _, _, plural, name = parse_path(path)
        return "list" if plural is not None and name is None else "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


class Kube:
    """Reads through one ApiClient; counts the writes its subclass makes.

    `fence`: called before every request that is not a GET; raises when this replica may not
    write now (leader election), else may return the seconds it still may: the request's
    timeout is bounded by them. `cache`: the watch cache reads are served from, when set."""

    def __init__(self, api: client.ApiClient, settings: OperatorSettings) -> None:
        self.api = api
        self.settings = settings
        self.writes = 0
        self.fence: Callable[[], float | None] | None = None
        self.cache: ReadCache | None = None
        # discovery answers, kept for a resync period: whether the Prometheus Operator's
        # CRDs are served is asked by every reconcile and changes about never
        self._discovered: dict[str, tuple[float, dict[str, Any] | None]] = {}

    @property
    def hash_annotation(self) -> str:
        """A hash of a child's rendering (apply.Writer.stamp writes it)."""
        return f"{self.settings.annotation_prefix}/desired-hash"

    @property
    def generation_annotation(self) -> str:
        """The service's metadata.generation whose rendering last wrote a child."""
        return f"{self.settings.annotation_prefix}/generation"

    def _request(
        self,
        method: str,
        *,
        path: str,
        body: object,
        query: list[tuple[str, str]] | None,
        content_type: str,
        timeout: float | tuple[float, float],
        accept: str = "application/json",
    ) -> Any:
        if method != "GET":
            left = self.fence() if self.fence is not None else None
            if left is not None and not isinstance(timeout, tuple):
                timeout = max(min(timeout, left), 0.5)
            if not path.endswith("/events"):
                metrics.WRITES.inc()
        metrics.API_REQUESTS.labels(verb(method, path, query)).inc()
        method, url, headers, payload, _ = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params={"Accept": accept, "Content-Type": content_type},
            body=body,  # the REST client serialises dicts for JSON and apply-patch+yaml
            auth_settings=["BearerToken"],
        )
        return self.api.call_api(
            method, url, header_params=headers, body=payload, _request_timeout=timeout
        )

    def _call(
        self,
        method: str,
        path: str,
        body: object = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One HTTP call; non-2xx answers raise ApiException with the server's message."""
        resp = self._request(
            method, path=path, body=body, query=query, content_type=content_type, timeout=30
        )
        data = _answered(resp)
        out = dict(json.loads(data)) if data else {}
        if method != "GET" and self.cache is not None:
            self._write_through(method, path, out)
        return out

    def _write_through(self, method: str, path: str, answer: dict[str, Any]) -> None:
        """The cache learns the operator's own writes at once, not when their watch event
        arrives: a reconcile right after (another child's event) must not apply again what
        it just applied, nor miss the Job it just created."""
        assert self.cache is not None
        api_version, namespace, plural, name = parse_path(path)
        kind = KINDS.get((api_version, plural or ""))
        if kind is None or namespace is None or name is None or path.endswith("/status"):
            return
        if method == "DELETE":
            self.cache.removed(api_version, kind, namespace, name)
        elif answer.get("kind") == kind and answer.get("metadata", {}).get("resourceVersion"):
            self.cache.written(answer)

    def watch(
        self, path: str, query: list[tuple[str, str]], timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """The events of one watch request (`query` without watch=1), until the server ends
        it after `timeout_seconds`. A refused request raises ApiException (410: too old)."""
        resp = self._request(
            "GET",
            path=path,
            body=None,
            query=[*query, ("watch", "1"), ("timeoutSeconds", str(timeout_seconds))],
            content_type="application/json",
            timeout=(10, timeout_seconds + 30),
        )
        raw = resp.response  # urllib3's, not read yet: the events arrive as JSON lines
        try:
            if not 200 <= resp.status <= 299:
                data = raw.read()
                raise ApiException(
                    status=resp.status,
                    reason=resp.reason,
                    body=data.decode(errors="replace") if data else None,
                )
            pending = b""
            for chunk in raw.stream(65536, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield dict(json.loads(line))
        finally:
            raw.release_conn()

    def get(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        *,
        cached: bool = False,
        fresh: bool = False,
    ) -> dict[str, Any] | None:
        """`cached`: from the watch cache whatever the kind (when it holds the kind), for a
        read right after the operator's own writes, which the cache already holds. `fresh`:
        from the API server whatever the cache holds."""
        if not fresh:
            held, obj = self.from_cache(api_version, kind, namespace, name, cached=cached)
            if held:
                return obj
        try:
            return self._call("GET", _path(api_version, kind, namespace, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _read_failed(f"reading {kind} {name}", exc) from exc

    def from_cache(
        self, api_version: str, kind: str, namespace: str, name: str, *, cached: bool = False
    ) -> tuple[bool, dict[str, Any] | None]:
        """(True, the object or None) when the watch cache answers a `get` (see `get`);
        (False, None) when the read must go to the API server. The cache holds only objects
        carrying the operator's label: its None is "no child of this name", not "no object"."""
        if self.cache is not None and (cached or (api_version, kind) in CACHED_GETS):
            held, obj = self.cache.lookup(api_version, kind, namespace, name)
            if held:
                return True, copy.deepcopy(obj)
        return False, None

    def list_children(
        self, api_version: str, kind: str, namespace: str, selector: str
    ) -> list[dict[str, Any]]:
        if self.cache is not None:
            cached = self.cache.select(api_version, kind, namespace, selector)
            if cached is not None:
                return copy.deepcopy(cached)
        try:
            out = self._call(
                "GET", _path(api_version, kind, namespace), query=[("labelSelector", selector)]
            )
        except ApiException as exc:
            raise _read_failed(f"listing {kind}s", exc) from exc
        return list(out.get("items", []))

    def events_of(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        """The Events of one object (core/v1, by field selector on the involved object)."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        try:
            out = self._call(
                "GET", f"/api/v1/namespaces/{namespace}/events", query=[("fieldSelector", selector)]
            )
        except ApiException as exc:
            raise _read_failed(f"listing the events of {kind} {name}", exc) from exc
        return list(out.get("items", []))

    def pod_log(self, namespace: str, pod: str, container: str, limit_bytes: int) -> str:
        """The first `limit_bytes` of a container's log (of its current run), each line after
        the kubelet's timestamp of it (RFC 3339, nanoseconds)."""
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
        query = [
            ("container", container),
            ("limitBytes", str(limit_bytes)),
            ("timestamps", "true"),
        ]
        try:
            return self._text("GET", path, query)
        except ApiException as exc:
            raise _read_failed(f"reading the log of pod {pod}", exc) from exc

    def _text(self, method: str, path: str, query: list[tuple[str, str]]) -> str:
        """One HTTP call whose answer is text (a pod's log), not JSON."""
        resp = self._request(
            method,
            path=path,
            body=None,
            query=query,
            content_type="application/json",
            timeout=30,
            accept="text/plain, */*",
        )
        data = _answered(resp)
        return data.decode(errors="replace") if data else ""

    def serves(self, group_version: str, plurals: set[str]) -> bool:
        """True when the API server serves every resource in `plurals` of `group_version`
        (discovery, which every authenticated client may read: no RBAC on CRDs needed).
        The answer is kept for a resync period."""
        now = time.monotonic()
        kept = self._discovered.get(group_version)
        if kept is not None and now - kept[0] < self.settings.resync_seconds:
            out = kept[1]
        else:
            try:
                out = self._call("GET", f"/apis/{group_version}")
            except ApiException as exc:
                if exc.status != 404:
                    raise _read_failed(f"discovering {group_version}", exc) from exc
                out = None
            self._discovered[group_version] = (now, out)
        return out is not None and plurals <= {r.get("name") for r in out.get("resources", [])}

    def post_event(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """A Kubernetes Event on `involved` (a report, not an object the operator manages:
        failing to post one is logged, never fails the reconcile)."""
        meta = involved["metadata"]
        now = dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", API_VERSION),
                "kind": involved.get("kind", "VLLMService"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.settings.field_manager},
            "reportingComponent": self.settings.field_manager,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._call("POST", f"/api/v1/namespaces/{meta['namespace']}/events", body=body)
        except (ApiException, ApplyError) as exc:
            log.warning(
                "event %s on %s/%s not posted: %s", reason, meta["namespace"], meta["name"], exc
            )


def _failed(what: str, exc: ApiException, *, kind: str = "", name: str = "") -> ApplyError:
    return ApplyError(
        f"{what}: {_reason(exc)}", permanent=False, code=exc.status, kind=kind, name=name
    )


def _answered(resp: Any) -> bytes:
    """The body of a 2xx answer; any other raises ApiException with the server's message."""
    data: bytes = resp.read()
    if not 200 <= resp.status <= 299:
        raise ApiException(
            status=resp.status,
            reason=resp.reason,
            body=data.decode(errors="replace") if data else None,
        )
    return data


def _read_failed(what: str, exc: ApiException) -> ReadError:
    return ReadError(f"{what}: {_reason(exc)}", permanent=False, code=exc.status)


def _reason(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "").get("message", exc.reason))
    except (TypeError, ValueError):
        return str(exc.reason)
