"""Step 3 of the flow (apply): the one module that writes to the Kubernetes API.

Children are written with server-side apply (field manager from the settings, force=true:
the operator is the authority on the fields it renders). Before writing, the live object is
read and compared: when it already carries every rendered field, nothing is written, so a
resync where nothing changed makes zero write calls. Children that are no longer rendered are
deleted (only ones this service controls). 404 and 409 are handled explicitly.

An object of a child's name that this service does not own (a Service, an HPA someone made
by hand) is never written over: the write is refused with NotOwnedError, which the status
reports. The watch cache holds only the operator's labelled objects, so before a create (the
cache says absent) the object is read from the API server: one read per create, none on a
resync.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kubernetes.client.exceptions import ApiException

from vllm_operator import API_VERSION
from vllm_operator.api.quantity import parse_quantity
from vllm_operator.observe.state import written_generation
from vllm_operator.render.meta import SERVICE_LABEL
from vllm_operator.write.transport import (
    PLURALS,
    ApplyError,
    Kube,
    NotOwnedError,
    ReadError,
    _failed,
    _path,
    _reason,
)

log = logging.getLogger("vllm_operator")

# Children whose existence depends on the spec; pruned when no longer rendered.
PRUNABLE = (
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("policy/v1", "PodDisruptionBudget"),
    # a canary's bake: the slice that puts its pod in the Service's endpoints
    ("discovery.k8s.io/v1", "EndpointSlice"),
)
# The Prometheus Operator's kinds: rendered, and pruned, only where its CRDs are served.
MONITORING_PRUNABLE = (
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
)


def _quantity(value: str) -> Fraction | None:
    """The one quantity parser (api.quantity.parse_quantity, what CEL's quantity() reads); None for
    what is not a quantity."""
    try:
        return parse_quantity(value)
    except (ValueError, TypeError, ZeroDivisionError):
        return None


# Values the API server drops from a field tagged `omitempty` (an env var's or a toleration's
# `value: ""`, an empty list or map): a live object without the key carries them already, and
# a write could not add them (server-side apply would store the same object): not drift.
OMITTED_WHEN_EMPTY: tuple[object, ...] = ("", [], {})


# Where the Kubernetes schemas say a field is a resource quantity (resource.Quantity), which
# the API server may re-spell (1000m -> 1, 1Gi stays, 2e3 -> 2k): a value directly under one
# of these maps (a container's requests/limits, a pod's overhead, a quota's hard), or under one
# of these keys (an emptyDir's sizeLimit, an HPA target's averageValue/value). Nowhere else is
# a string read as a number: an env value, a label, an annotation or a revision hash such as
# "7e65125782" is compared as the string it is.
QUANTITY_MAPS = frozenset({"requests", "limits", "overhead", "hard", "capacity", "allocatable"})
QUANTITY_KEYS = frozenset({"sizeLimit", "averageValue"})


def _is_quantity_field(path: tuple[str, ...]) -> bool:
    if not path:
        return False
    if path[-1] in QUANTITY_KEYS or (len(path) > 1 and path[-2] in QUANTITY_MAPS):
        return True
    return len(path) > 1 and path[-2] == "target" and path[-1] == "value"  # an HPA metric's


def covers(desired: object, live: object, path: tuple[str, ...] = ()) -> bool:  # noqa: PLR0911
    """True when `live` already carries every field of `desired` (the API server may add
    defaults; it may also re-spell quantities, e.g. 1000m -> 1, which are compared as numbers
    where the schema says the field is a quantity, and only there). `path` is the keys down to
    `desired` (list items keep their list's key)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            covers(v, live[k], (*path, k)) if k in live else v in OMITTED_WHEN_EMPTY
            for k, v in desired.items()
        )
    if isinstance(desired, list):
        if not isinstance(live, list):
            return False
        if desired and all(isinstance(d, dict) and "name" in d for d in desired):
            by_name = {item.get("name"): item for item in live if isinstance(item, dict)}
            return all(
                d["name"] in by_name and covers(d, by_name[d["name"]], path) for d in desired
            )
        return len(desired) == len(live) and all(
            covers(d, x, path) for d, x in zip(desired, live, strict=True)
        )
    if desired == live:
        return True
    if isinstance(desired, str) and isinstance(live, str | int) and _is_quantity_field(path):
        q1, q2 = _quantity(desired), _quantity(str(live))
        return q1 is not None and q1 == q2
    return False


def _owner_uids(obj: dict[str, Any]) -> set[str]:
    return {str(o.get("uid")) for o in obj.get("metadata", {}).get("ownerReferences") or []}


def _group(api_version: object) -> str:
    return str(api_version).rsplit("/", 1)[0]


def _owners(obj: dict[str, Any]) -> str:
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    if not refs:
        return "it has no owner reference"
    return "owned by " + ", ".join(f"{o.get('kind')} {o.get('name')}" for o in refs)


def owned(live: dict[str, Any], desired: dict[str, Any]) -> bool:
    """True when `live` belongs to the owner `desired` names: an owner reference to its uid,
    or to an earlier service of the same kind and name (deleted, its children not yet
    garbage-collected: two objects of one name cannot coexist, so it was this service's
    predecessor, and the apply moves the child to this one)."""
    wanted = desired["metadata"].get("ownerReferences") or []
    if not wanted:
        return True  # nothing to own it by: not a child
    if _owner_uids(live) & _owner_uids(desired):
        return True
    return any(
        o.get("kind") == w.get("kind")
        and o.get("name") == w.get("name")
        and _group(o.get("apiVersion")) == _group(w.get("apiVersion"))
        for o in live.get("metadata", {}).get("ownerReferences") or []
        for w in wanted
    )


@dataclass(frozen=True)
class Change:
    kind: str
    name: str
    action: str  # "created", "updated", "deleted"


class PreconditionError(ApplyError):
    """An apply conditioned on the resourceVersion it was rendered from found the object
    changed since (Writer.apply's `precondition`)."""


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
        owned_only: bool = False,
        precondition: str | None = None,
    ) -> Change | None:
        """Server-side apply `desired` unless `live` (read here when not given) covers it.
        `cached`: read `live` from the watch cache where it holds the kind (kube.get).
        `owned_only`: an object of that name which `desired`'s owner does not own is not
        written (NotOwnedError); absent from the watch cache, it is read from the API server
        before it is created.

        `generation`: the service's metadata.generation `desired` was rendered from; it is
        recorded on the child when written, and a child already written from a later
        generation is never regressed (a reconcile that read a stale service is a no-op).
        Not part of the comparison: a new generation that renders the same child writes
        nothing.

        `precondition`: the resourceVersion `desired` was rendered from; the API server refuses
        the apply (409, a PreconditionError here) when the object changed since (the
        autoscaler's scale between the read and this write). Not part of the comparison."""
        desired = self.stamp(desired)
        meta = desired["metadata"]
        api_version, kind = desired["apiVersion"], desired["kind"]
        if live is None:
            held, live = self.from_cache(
                api_version, kind, meta["namespace"], meta["name"], cached=cached
            )
            if not held or (live is None and owned_only):
                # (the cache's absent is "no object with the operator's label" only)
                live = self.get(api_version, kind, meta["namespace"], meta["name"], fresh=True)
        if owned_only and live is not None and not owned(live, desired):
            raise NotOwnedError(
                f"{kind} {meta['name']} exists and is not owned by this VLLMService "
                f"({_owners(live)}): not taken over; delete or rename it",
                permanent=False,
                kind=kind,
                name=meta["name"],
            )
        if live is not None and covers(desired, live):
            return None
        if generation is not None:
            ours = live is not None and bool(_owner_uids(live) & _owner_uids(desired))
            if ours and self.newer_than(live, generation):
                log.info(
                    "%s %s was written from generation %s; not regressing it to %s",
                    kind,
                    meta["name"],
                    written_generation(live, self.generation_annotation),
                    generation,
                )
                return None
            meta["annotations"][self.generation_annotation] = str(generation)
        if precondition is not None and live is not None:
            desired["metadata"]["resourceVersion"] = precondition
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
            if exc.status == 409 and "resourceVersion" in desired["metadata"]:
                raise PreconditionError(
                    f"{kind} {meta['name']} changed since it was read: {reason}",
                    permanent=False,
                    code=409,
                    kind=kind,
                    name=meta["name"],
                ) from exc
            if exc.status == 409:  # conflict despite force: a concurrent delete; retry soon
                raise ApplyError(
                    f"{kind} {meta['name']}: conflict: {reason}",
                    permanent=False,
                    code=409,
                    kind=kind,
                    name=meta["name"],
                ) from exc
            raise ApplyError(
                f"{kind} {meta['name']}: {reason}",
                permanent=exc.status in (400, 422),
                code=exc.status,
                kind=kind,
                name=meta["name"],
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
            raise _failed(f"deleting {kind} {name}", exc, kind=kind, name=name) from exc
        return True

    def patch_configmap(self, namespace: str, name: str, data: dict[str, str]) -> bool:
        """Merges `data` into a ConfigMap's data; False when it does not exist."""
        try:
            self.writes += 1
            self._call(
                "PATCH",
                _path("v1", "ConfigMap", namespace, name),
                body={"data": data},
                # the run record's keys are the operator's: its field manager owns them (an
                # unnamed patch is recorded as "Go-http-client" or the client's user agent)
                query=[("fieldManager", self.settings.field_manager)],
                content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise _failed(f"ConfigMap {name}", exc, kind="ConfigMap", name=name) from exc
        return True

    def drop_finalizer(
        self, namespace: str, name: str, body: dict[str, Any], finalizer: str
    ) -> None:
        """Removes `finalizer` from the service: a JSON patch that tests the list first, so a
        finalizer another controller added meanwhile is never dropped with it (a failed test
        is a 422: the next reconcile reads the list again)."""
        finalizers = list(body["metadata"].get("finalizers") or [])
        if finalizer not in finalizers:
            return
        try:
            self.writes += 1
            self._call(
                "PATCH",
                _path(API_VERSION, "VLLMService", namespace, name),
                body=[
                    {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                    {
                        "op": "replace",
                        "path": "/metadata/finalizers",
                        "value": [f for f in finalizers if f != finalizer],
                    },
                ],
                query=[("fieldManager", self.settings.field_manager)],
                content_type="application/json-patch+json",
            )
        except ApiException as exc:
            if exc.status == 404:
                return
            raise ApplyError(
                f"finalizer of {name}: {_reason(exc)}", permanent=False, code=exc.status
            ) from exc

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


__all__ = [
    "PLURALS",
    "ApplyError",
    "Change",
    "Kube",
    "NotOwnedError",
    "PreconditionError",
    "ReadError",
    "Writer",
    "_path",
    "covers",
    "owned",
]
