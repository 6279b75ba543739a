"""The informer's event handling and the cache's rules, without a server (the list and watch
against the real API server: tests/integration/test_informer.py)."""

from __future__ import annotations

from typing import Any

import pytest

from vllm_operator.runtime.informer import Cache, Informer, matches, parse_selector
from vllm_operator.write.transport import parse_path, verb

OURS = {"app.kubernetes.io/managed-by": "vllm-operator", "serving.vllm-operator.dev/service": "s"}


def _cm(name: str, rv: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": str(rv),
            "labels": OURS if labels is None else labels,
            "managedFields": [{"manager": "x"}],
        },
        "data": {"rv": str(rv)},
    }


def _informer(events: list[tuple[str, str]] | None = None) -> Informer:
    sink = events if events is not None else []
    return Informer(
        None,  # type: ignore[arg-type]  # no requests in these tests
        "v1",
        "ConfigMap",
        "ns",
        lambda kind, obj: sink.append((kind, obj["metadata"]["name"])),
    )


def _cache(woken: list[tuple[str, str]], watched: tuple[str, str, bool]) -> Cache:
    """A cache of one watched kind in namespace "ns" (no requests), its wakes into `woken`."""
    return Cache(
        None,  # type: ignore[arg-type]  # no requests in these tests
        ["ns"],
        lambda ns, name: woken.append((ns, name)),
        watched=(watched,),
    )


def test_selectors() -> None:
    assert parse_selector("a=b, c==d") == {"a": "b", "c": "d"}
    assert parse_selector("") == {}
    assert parse_selector("a!=b") is None
    assert parse_selector("a in (b)") is None
    assert parse_selector("a") is None
    assert matches({"a": "b", "x": "y"}, {"a": "b"})
    assert not matches({"a": "c"}, {"a": "b"})
    assert not matches(None, {"a": "b"})


def test_events_update_the_cache_in_version_order() -> None:
    events: list[tuple[str, str]] = []
    inf = _informer(events)
    assert inf._handle({"type": "ADDED", "object": _cm("a", 5)})
    got = inf.get("ns", "a")
    assert got is not None
    assert got["kind"] == "ConfigMap"
    assert got["apiVersion"] == "v1"
    assert "managedFields" not in got["metadata"]
    inf._handle({"type": "MODIFIED", "object": _cm("a", 7)})
    inf.written(_cm("a", 9))  # the operator's own write, answered before its event
    inf._handle({"type": "MODIFIED", "object": _cm("a", 8)})  # older: kept 9
    assert (inf.get("ns", "a") or {})["data"] == {"rv": "9"}
    inf._handle({"type": "DELETED", "object": _cm("a", 10)})
    assert inf.get("ns", "a") is None
    assert events == [("ADDED", "a"), ("MODIFIED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


def test_bookmarks_advance_the_version_and_410_relists() -> None:
    inf = _informer()
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}
    assert inf._handle(bookmark)
    assert inf._version == "42"
    assert inf.keys() == []
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}
    assert inf._handle(gone) is False
    with pytest.raises(RuntimeError, match="forbidden"):
        inf._handle({"type": "ERROR", "object": {"code": 403, "message": "forbidden"}})


def test_written_ignores_objects_the_watch_would_not_carry() -> None:
    inf = _informer()
    inf.written(_cm("theirs", 3, labels={}))
    assert inf.get("ns", "theirs") is None
    inf.written(_cm("ours", 3))
    assert inf.get("ns", "ours") is not None
    inf.removed("ns", "ours")
    assert inf.get("ns", "ours") is None


def test_the_cache_does_not_answer_before_its_watch_listed() -> None:
    woken: list[tuple[str, str]] = []
    cache = _cache(woken, ("v1", "ConfigMap", True))
    assert cache.lookup("v1", "ConfigMap", "ns", "a") == (False, None)
    assert cache.select("v1", "ConfigMap", "ns", "x=y") is None
    assert cache.lookup("apps/v1", "Deployment", "ns", "a") == (False, None)  # not watched
    informer = cache.informers[("v1", "ConfigMap", "ns")]
    informer.synced.set()
    informer._handle({"type": "ADDED", "object": _cm("a", 1)})
    assert cache.lookup("v1", "ConfigMap", "ns", "a")[0] is True
    assert woken == [("ns", "s")]  # the owner, from the service label


def test_a_holder_pod_wakes_the_services_it_holds_for_and_other_pods_wake_no_one() -> None:
    woken: list[tuple[str, str]] = []
    cache = _cache(woken, ("v1", "Pod", False))
    informer = cache.informers[("v1", "Pod", "ns")]
    informer.synced.set()

    def pod(name: str, rv: int, annotations: dict[str, str], ready: str) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "resourceVersion": str(rv),
                "labels": OURS,
                "annotations": annotations,
            },
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }

    holds = {"serving.vllm-operator.dev/holds-for": '{"chat":18001,"embed":18002}'}
    informer._handle({"type": "ADDED", "object": pod("vllm-holder-x", 1, holds, "False")})
    assert woken == [("ns", "chat"), ("ns", "embed")]
    informer._handle({"type": "MODIFIED", "object": pod("vllm-holder-x", 2, holds, "True")})
    assert woken[2:] == [("ns", "chat"), ("ns", "embed")]
    # a serving pod (no holds-for) wakes no one: its Deployment's status does
    informer._handle({"type": "ADDED", "object": pod("chat-abc", 3, {}, "True")})
    assert len(woken) == 4
    assert cache.lookup("v1", "Pod", "ns", "chat-abc")[0] is True  # (the event was handled)


def test_paths_and_verbs() -> None:
    assert parse_path("/apis/apps/v1/namespaces/n/deployments/x") == (
        "apps/v1",
        "n",
        "deployments",
        "x",
    )
    assert parse_path("/api/v1/namespaces/n/configmaps") == ("v1", "n", "configmaps", None)
    assert parse_path("/api/v1/namespaces/n") == ("v1", None, "namespaces", "n")
    assert parse_path("/apis/monitoring.coreos.com/v1") == (
        "monitoring.coreos.com/v1",
        None,
        None,
        None,
    )
    assert parse_path("/apis/apps/v1/deployments") == ("apps/v1", None, "deployments", None)
    assert verb("GET", "/apis/apps/v1/namespaces/n/deployments/x") == "get"
    assert verb("GET", "/api/v1/namespaces/n/pods", [("labelSelector", "a=b")]) == "list"
    assert verb("GET", "/api/v1/namespaces/n/pods", [("watch", "1")]) == "watch"
    assert verb("GET", "/apis/monitoring.coreos.com/v1") == "get"
    assert verb("PATCH", "/x") == "patch"
    assert verb("POST", "/x") == "create"
    assert verb("DELETE", "/x") == "delete"


def test_an_hpa_metrics_refresh_updates_the_cache_but_wakes_no_one() -> None:
    woken: list[tuple[str, str]] = []
    inf = Informer(
        None,  # type: ignore[arg-type]
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        "ns",
        lambda kind, obj: woken.append((kind, obj["metadata"]["resourceVersion"])),
    )

    def hpa(rv: int, waiting: str, desired: int) -> dict[str, Any]:
        obj = _cm("h", rv)
        del obj["data"]
        obj["status"] = {
            "currentMetrics": [{"pods": {"current": {"averageValue": waiting}}}],
            "desiredReplicas": desired,
        }
        return obj

    inf._handle({"type": "ADDED", "object": hpa(1, "0", 1)})
    inf._handle({"type": "MODIFIED", "object": hpa(2, "3", 1)})  # only the metric moved
    assert (inf.get("ns", "h") or {})["status"]["currentMetrics"][0]["pods"]["current"] == {
        "averageValue": "3"
    }
    inf._handle({"type": "MODIFIED", "object": hpa(3, "30", 2)})  # a scaling decision
    assert woken == [("ADDED", "1"), ("MODIFIED", "3")]


def test_lists_come_from_the_index_and_follow_label_changes() -> None:
    inf = _informer()
    svc = "serving.vllm-operator.dev/service"
    for i, owner in enumerate(["a", "a", "b"]):
        inf._handle({"type": "ADDED", "object": _cm(f"cm{i}", i + 1, {**OURS, svc: owner})})
    inf._handle({"type": "ADDED", "object": _cm("cm9", 9, {**OURS, svc: "a"})})
    names = [o["metadata"]["name"] for o in inf.select("ns", {svc: "a"})]
    assert names == ["cm0", "cm1", "cm9"]
    # an object relabelled to another owner moves in the index
    inf._handle({"type": "MODIFIED", "object": _cm("cm1", 10, {**OURS, svc: "b"})})
    assert [o["metadata"]["name"] for o in inf.select("ns", {svc: "b"})] == ["cm1", "cm2"]
    assert [o["metadata"]["name"] for o in inf.select("ns", {svc: "a"})] == ["cm0", "cm9"]
    # further terms of the selector still apply; a deletion leaves the index
    assert inf.select("ns", {svc: "a", "x": "y"}) == []
    inf._handle({"type": "DELETED", "object": _cm("cm0", 11, {**OURS, svc: "a"})})
    assert [o["metadata"]["name"] for o in inf.select("ns", {svc: "a"})] == ["cm9"]
    # selectors without an indexed label scan the namespace
    assert len(inf.select("ns", {"app.kubernetes.io/managed-by": "vllm-operator"})) == 3
    assert inf.select("elsewhere", {svc: "b"}) == []
    assert inf._index == {
        ("ns", svc, "a"): {("ns", "cm9")},
        ("ns", svc, "b"): {("ns", "cm1"), ("ns", "cm2")},
    }
