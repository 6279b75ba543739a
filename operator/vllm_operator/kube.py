"""Transport and reads: the operator's one HTTP client to the Kubernetes API.

Every request of the operator goes through `Kube._call` (one place to count calls by verb,
to fence writes, to serve reads from a cache). apply.Writer inherits it and adds the writes.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vllm_operator import API_VERSION, PLURAL
from vllm_operator.settings import OperatorSettings

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
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrules",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitors",
    (API_VERSION, "VLLMService"): PLURAL,
}


class ApplyError(RuntimeError):
    """The API server refused a request (a denied or failed write, a failed read): the
    server's message, and its HTTP status code. `permanent` when the same request can never
    succeed for this spec (400/422 on a child); the reconcile still reports it in the status
    and retries with back-off, since an admission policy or a quota can change."""

    def __init__(self, message: str, *, permanent: bool, code: int | None = None) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.code = code


def _path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{PLURALS[(api_version, kind)]}"
    return f"{path}/{name}" if name else path


class Kube:
    """Reads through one ApiClient; counts the writes its subclass makes."""

    def __init__(self, api: client.ApiClient, settings: OperatorSettings) -> None:
        self.api = api
        self.settings = settings
        self.writes = 0

    def _call(
        self,
        method: str,
        path: str,
        body: object = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One HTTP call; non-2xx answers raise ApiException with the server's message."""
        method, url, headers, payload, _ = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,  # the REST client serialises dicts for JSON and apply-patch+yaml
            auth_settings=["BearerToken"],
        )
        resp = self.api.call_api(
            method, url, header_params=headers, body=payload, _request_timeout=30
        )
        data = resp.read()  # type: ignore[no-untyped-call]
        if not 200 <= resp.status <= 299:
            raise ApiException(
                status=resp.status,
                reason=resp.reason,
                body=data.decode(errors="replace") if data else None,
            )
        return dict(json.loads(data)) if data else {}

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", _path(api_version, kind, namespace, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _failed(f"reading {kind} {name}", exc) from exc

    def list_children(
        self, api_version: str, kind: str, namespace: str, selector: str
    ) -> list[dict[str, Any]]:
        try:
            out = self._call(
                "GET", _path(api_version, kind, namespace), query=[("labelSelector", selector)]
            )
        except ApiException as exc:
            raise _failed(f"listing {kind}s", exc) from exc
        return list(out.get("items", []))

    def serves(self, group_version: str, plurals: set[str]) -> bool:
        """True when the API server serves every resource in `plurals` of `group_version`
        (discovery, which every authenticated client may read: no RBAC on CRDs needed)."""
        try:
            out = self._call("GET", f"/apis/{group_version}")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise _failed(f"discovering {group_version}", exc) from exc
        return plurals <= {r.get("name") for r in out.get("resources", [])}


def _failed(what: str, exc: ApiException) -> ApplyError:
    return ApplyError(f"{what}: {_reason(exc)}", permanent=False, code=exc.status)


def _reason(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "").get("message", exc.reason))
    except (TypeError, ValueError):
        return str(exc.reason)
