"""Step 3 of the flow (apply): the one module that writes to the Kubernetes API.

Children are written with server-side apply (field manager from the settings, force=true:
the operator is the authority on the fields it renders). Before writing, the live object is
read and compared: when it already carries every rendered field, nothing is written, so a
resync where nothing changed makes zero write calls. Children that are no longer rendered are
deleted (only ones this service controls). 404 and 409 are handled explicitly.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from vllm_operator import API_VERSION
from vllm_operator.kube import PLURALS, ApplyError, Kube, _failed, _path, _reason
from vllm_operator.render.meta import SERVICE_LABEL

log = logging.getLogger("vllm_operator")

# Children whose existence depends on the spec; pruned when no longer rendered.
PRUNABLE = (("autoscaling/v2", "HorizontalPodAutoscaler"), ("policy/v1", "PodDisruptionBudget"))
# The Prometheus Operator's kinds: rendered, and pruned, only where its CRDs are served.
MONITORING_PRUNABLE = (
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
)


def _quantity(value: str) -> Decimal | None:
    try:
        return Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]
    except (ValueError, InvalidOperation, TypeError):
        return None


def covers(desired: object, live: object) -> bool:  # noqa: PLR0911
    """True when `live` already carries every field of `desired` (the API server may add
    defaults; it may also re-spell quantities, e.g. 1000m -> 1)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            k in live and covers(v, live[k]) for k, v in desired.items()
        )
    if isinstance(desired, list):
        if not isinstance(live, list):
            return False
        if desired and all(isinstance(d, dict) and "name" in d for d in desired):
            by_name = {item.get("name"): item for item in live if isinstance(item, dict)}
            return all(d["name"] in by_name and covers(d, by_name[d["name"]]) for d in desired)
        return len(desired) == len(live) and all(
            covers(d, x) for d, x in zip(desired, live, strict=True)
        )
    if desired == live:
        return True
    if isinstance(desired, str) and isinstance(live, str | int):
        q1, q2 = _quantity(desired), _quantity(str(live))
        return q1 is not None and q1 == q2
    return False


def _owner_uids(obj: dict[str, Any]) -> set[str]:
    return {str(o.get("uid")) for o in obj.get("metadata", {}).get("ownerReferences") or []}


def written_generation(obj: dict[str, Any] | None, key: str) -> int:
    """The service generation whose rendering last wrote `obj` (0: none recorded)."""
    value = ((obj or {}).get("metadata", {}).get("annotations") or {}).get(key, "")
    return int(value) if str(value).isdigit() else 0


@dataclass(frozen=True)
class Change:
    kind: str
    name: str
    action: str  # "created", "updated", "deleted"


class Writer(Kube):
    """The one writer: server-side apply, prune, delete, run-record patches and the status.
    Transport and reads (and the write counter) are inherited from kube.Kube."""

    def stamp(self, desired: dict[str, Any]) -> dict[str, Any]:
        """A copy of `desired` carrying a hash of itself in an annotation.

        `covers` alone cannot see a field that was removed from the rendered object (an env
        var, the API key reference, a node selector): live still covers the smaller desired
        object. The hash changes with any change to the rendered object, so the write happens
        and server-side apply drops the fields this manager no longer sets.
        """
        body = json.dumps(desired, sort_keys=True, separators=(",", ":")).encode()
        out = copy.deepcopy(desired)
        annotations = out["metadata"].setdefault("annotations", {})
        annotations[self.hash_annotation] = hashlib.sha256(body).hexdigest()[:16]
        return out

    @property
    def hash_annotation(self) -> str:
        return f"{self.settings.annotation_prefix}/desired-hash"

    @property
    def generation_annotation(self) -> str:
        """The service's metadata.generation whose rendering last wrote a child."""
        return f"{self.settings.annotation_prefix}/generation"

    def newer_than(self, live: dict[str, Any] | None, generation: int | None) -> bool:
        """True when `live` was written from a later generation of its service than
        `generation`: whoever renders from `generation` read a stale service."""
        if generation is None or live is None:
            return False
        return written_generation(live, self.generation_annotation) > generation

    def apply(
        self,
        desired: dict[str, Any],
        live: dict[str, Any] | None = None,
        *,
        generation: int | None = None,
        cached: bool = False,
    ) -> Change | None:
        """Server-side apply `desired` unless `live` (read here when not given) covers it.
        `cached`: read `live` from the watch cache where it holds the kind (kube.get).

        `generation`: the service's metadata.generation `desired` was rendered from; it is
        recorded on the child when written, and a child already written from a later
        generation is never regressed (a reconcile that read a stale service is a no-op).
        Not part of the comparison: a new generation that renders the same child writes
        nothing."""
        desired = self.stamp(desired)
        meta = desired["metadata"]
        api_version, kind = desired["apiVersion"], desired["kind"]
        if live is None:
            live = self.get(api_version, kind, meta["namespace"], meta["name"], cached=cached)
        if live is not None and covers(desired, live):
            return None
        if generation is not None:
            owned = live is not None and bool(_owner_uids(live) & _owner_uids(desired))
            if owned and self.newer_than(live, generation):
                log.info(
                    "%s %s was written from generation %s; not regressing it to %s",
                    kind,
                    meta["name"],
                    written_generation(live, self.generation_annotation),
                    generation,
                )
                return None
            meta["annotations"][self.generation_annotation] = str(generation)
        try:
            self.writes += 1
            self._call(
                "PATCH",
                _path(api_version, kind, meta["namespace"], meta["name"]),
                body=desired,
                query=[("fieldManager", self.settings.field_manager), ("force", "true")],
                content_type="application/apply-patch+yaml",
            )
        except ApiException as exc:
            reason = _reason(exc)
            if exc.status == 409:  # conflict despite force: a concurrent delete; retry soon
                raise ApplyError(
                    f"{kind} {meta['name']}: conflict: {reason}", permanent=False, code=409
                ) from exc
            raise ApplyError(
                f"{kind} {meta['name']}: {reason}",
                permanent=exc.status in (400, 422),
                code=exc.status,
            ) from exc
        return Change(kind, meta["name"], "created" if live is None else "updated")

    def prune(
        self,
        namespace: str,
        service: str,
        owner_uid: str,
        keep: set[tuple[str, str]],
        kinds: tuple[tuple[str, str], ...] = PRUNABLE,
        *,
        generation: int | None = None,
    ) -> list[Change]:
        """Deletes children of `service` of the prunable `kinds` that were not rendered
        (never one written from a later generation than `generation`: a stale view)."""
        changes = []
        for api_version, kind in kinds:
            for item in self.list_children(
                api_version, kind, namespace, f"{SERVICE_LABEL}={service}"
            ):
                name = item["metadata"]["name"]
                owners = item["metadata"].get("ownerReferences", [])
                if (kind, name) in keep or not any(o.get("uid") == owner_uid for o in owners):
                    continue
                if self.newer_than(item, generation):
                    continue
                if self.delete(api_version, kind, namespace, name):
                    changes.append(Change(kind, name, "deleted"))
        return changes

    def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        propagation: str = "Background",
    ) -> bool:
        try:
            self.writes += 1
            self._call(
                "DELETE",
                _path(api_version, kind, namespace, name),
                body={"propagationPolicy": propagation},
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise _failed(f"deleting {kind} {name}", exc) from exc
        return True

    def patch_configmap(self, namespace: str, name: str, data: dict[str, str]) -> bool:
        """Merges `data` into a ConfigMap's data; False when it does not exist."""
        try:
            self.writes += 1
            self._call(
                "PATCH",
                _path("v1", "ConfigMap", namespace, name),
                body={"data": data},
                content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise _failed(f"ConfigMap {name}", exc) from exc
        return True

    def replace_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Replaces the service's whole status (the status subresource).

        A JSON patch `add /status` replaces the object at /status as one value, so nothing the
        operator no longer computes can survive (a merge patch keeps nested keys it does not
        name, e.g. status.benchmark.passed of an earlier revision). Server-side apply would
        too, but only for fields its own Apply entry owns: fields written by an earlier
        version's merge patches belong to an Update entry and would stay. No resourceVersion
        is needed: the status is recomputed from a fresh read under the service's lock.
        """
        try:
            self.writes += 1
            self._call(
                "PATCH",
                _path(API_VERSION, "VLLMService", namespace, name) + "/status",
                body=[{"op": "add", "path": "/status", "value": status}],
                query=[("fieldManager", self.settings.field_manager)],
                content_type="application/json-patch+json",
            )
        except ApiException as exc:
            if exc.status == 404:  # deleted meanwhile: nothing left to report on
                return
            raise ApplyError(
                f"status of {name}: {_reason(exc)}", permanent=False, code=exc.status
            ) from exc


__all__ = ["PLURALS", "ApplyError", "Change", "Kube", "Writer", "_path", "covers"]
