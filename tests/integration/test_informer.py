"""The operator's child watches against the real API server: the label selector is applied by
the server (the audit log shows it on every list and watch request), objects the operator
does not own never reach the cache, and the cache follows creations, changes and deletions.

The watching client runs as a ServiceAccount of the audited namespace (the local cluster
audits every request of those, reads included)."""

from __future__ import annotations

import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.support import audit, wait_for
from vllm_localenv.cluster import AUDITED_NAMESPACE, LocalCluster
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.render.meta import SERVICE_LABEL
from vllm_operator.runtime.informer import MANAGED_SELECTOR, Cache, Informer
from vllm_operator.write.transport import Kube

pytestmark = pytest.mark.cluster

OURS = {"app.kubernetes.io/managed-by": "vllm-operator", SERVICE_LABEL: "svc"}


@pytest.fixture
def watcher(cluster: LocalCluster, namespace: str, tmp_path: Path) -> Iterator[tuple[Kube, str]]:
    """A Kube client as a fresh audited ServiceAccount that may list and watch ConfigMaps
    and Deployments in `namespace`; and its user name."""
    account = f"informer-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", AUDITED_NAMESPACE, check=False)
    cluster.kubectl("create", "serviceaccount", account, "-n", AUDITED_NAMESPACE)
    cluster.kubectl(
        "create",
        "role",
        "watcher",
        "-n",
        namespace,
        "--verb=list,watch",
        "--resource=configmaps,deployments.apps",
    )
    cluster.kubectl(
        "create",
        "rolebinding",
        "watcher",
        "-n",
        namespace,
        "--role=watcher",
        f"--serviceaccount={AUDITED_NAMESPACE}:{account}",
    )
    kubeconfig = cluster.service_account_kubeconfig(
        AUDITED_NAMESPACE, account, tmp_path / "watcher.kubeconfig"
    )
    api = config.new_client_from_config(config_file=str(kubeconfig))
    yield Kube(api, OperatorSettings()), f"system:serviceaccount:{AUDITED_NAMESPACE}:{account}"
    cluster.kubectl("delete", "serviceaccount", account, "-n", AUDITED_NAMESPACE, check=False)


def _configmap(core: client.CoreV1Api, namespace: str, name: str, labels: dict[str, str]) -> None:
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}
    )


def test_the_server_filters_the_watch_and_unowned_objects_never_arrive(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    watcher: tuple[Kube, str],
) -> None:
    kube, username = watcher
    core = client.CoreV1Api(api_client)
    _configmap(core, namespace, "ours-before", OURS)
    _configmap(core, namespace, "theirs-before", {})
    # the same keys, another manager: not ours either
    _configmap(core, namespace, "other-manager", {**OURS, "app.kubernetes.io/managed-by": "x"})
    events: list[tuple[str, str]] = []
    since = time.time()
    informer = Informer(
        kube,
        "v1",
        "ConfigMap",
        namespace,
        lambda kind, obj: events.append((kind, obj["metadata"]["name"])),
        timeout_seconds=20,
    )
    informer.start()
    try:
        assert informer.synced.wait(120)
        assert informer.keys() == [(namespace, "ours-before")]
        listed = informer.get(namespace, "ours-before")
        assert listed is not None
        assert listed["kind"] == "ConfigMap"  # as a GET returns it (list items carry none)
        assert "managedFields" not in listed["metadata"]

        _configmap(core, namespace, "theirs-after", {})
        _configmap(core, namespace, "ours-after", OURS)
        # the positive control: the watch delivered an object created after the unowned one
        # (events come in resourceVersion order: had the unowned one been sent, it came first;
        # the callback runs a moment after the cache holds the object)
        wait_for(
            "ours-after in the cache and its event",
            lambda: informer.get(namespace, "ours-after") and len(events) >= 2,
        )
        assert events == [("ADDED", "ours-before"), ("ADDED", "ours-after")]

        core.patch_namespaced_config_map("ours-after", namespace, {"data": {"k": "w"}})
        core.patch_namespaced_config_map("theirs-after", namespace, {"data": {"k": "w"}})
        core.delete_namespaced_config_map("ours-before", namespace)
        wait_for(
            "the deletion and its event",
            lambda: informer.get(namespace, "ours-before") is None and len(events) >= 4,
        )
        after = informer.get(namespace, "ours-after")
        assert after is not None
        assert after["data"] == {"k": "w"}
        assert events[2:] == [("MODIFIED", "ours-after"), ("DELETED", "ours-before")]
        assert sorted(informer.keys()) == [(namespace, "ours-after")]
    finally:
        informer.stop()

    def requests_with_a_watch() -> list[dict[str, object]]:
        seen = audit(cluster.audit_log, username, namespace, since)
        return seen if any(e["verb"] == "watch" for e in seen) else []

    requests = wait_for("the watch request in the audit log", requests_with_a_watch)
    verbs = {e["verb"] for e in requests}
    assert {"list", "watch"} <= verbs, verbs
    selectors = [
        urllib.parse.parse_qs(urllib.parse.urlsplit(e["requestURI"]).query).get("labelSelector")
        for e in requests
    ]
    assert selectors == [[MANAGED_SELECTOR]] * len(requests)
    watch_uri = next(e["requestURI"] for e in requests if e["verb"] == "watch")
    assert "allowWatchBookmarks=true" in watch_uri
    assert "resourceVersion=" in watch_uri  # resumed from the list, not from scratch


def test_the_cache_answers_reads_only_once_synced_and_names_the_owner(
    api_client: client.ApiClient, namespace: str, watcher: tuple[Kube, str]
) -> None:
    kube, _ = watcher
    owners: list[tuple[str, str]] = []
    cache = Cache(
        kube,
        [namespace],
        lambda ns, name: owners.append((ns, name)),
        timeout_seconds=20,
        watched=(("v1", "ConfigMap", True), ("apps/v1", "Deployment", False)),
    )
    assert cache.lookup("v1", "ConfigMap", namespace, "x") == (False, None)  # not started
    assert cache.select("v1", "ConfigMap", namespace, f"{SERVICE_LABEL}=svc") is None
    core = client.CoreV1Api(api_client)
    _configmap(core, namespace, "run-1", OURS)
    cache.start()
    try:
        assert cache.wait_synced(120)
        held, obj = cache.lookup("v1", "ConfigMap", namespace, "run-1")
        assert held
        assert obj is not None
        assert cache.lookup("v1", "ConfigMap", namespace, "absent") == (True, None)
        assert [
            o["metadata"]["name"]
            for o in cache.select("v1", "ConfigMap", namespace, f"{SERVICE_LABEL}=svc") or []
        ] == ["run-1"]
        assert cache.select("v1", "ConfigMap", namespace, f"{SERVICE_LABEL}=other") == []
        # a selector the cache does not evaluate goes to the API server
        assert cache.select("v1", "ConfigMap", namespace, f"{SERVICE_LABEL} in (svc)") is None
        # a namespace no watch covers: not answered from the cache
        assert cache.lookup("v1", "ConfigMap", "elsewhere", "run-1") == (False, None)
        # the initial list names the owner (its callback runs a moment after the sync)
        wait_for("the owner of run-1", lambda: owners)
        assert owners == [(namespace, "svc")]
        _configmap(core, namespace, "run-2", {**OURS, SERVICE_LABEL: "svc-2"})
        wait_for("the owner of run-2", lambda: (namespace, "svc-2") in owners)
    finally:
        cache.stop()


def test_a_watch_from_a_compacted_version_relists(
    api_client: client.ApiClient, namespace: str, watcher: tuple[Kube, str]
) -> None:
    """410 Gone (the server no longer has the version the watch resumes from): the watch
    returns to relist instead of failing or resuming from nothing."""
    kube, _ = watcher
    core = client.CoreV1Api(api_client)
    informer = Informer(kube, "v1", "ConfigMap", namespace, timeout_seconds=120)
    informer._version = "1"  # long compacted away on any cluster that has run a while
    started = time.monotonic()
    informer._watch()  # returns (relist) rather than raising or waiting out the timeout
    assert time.monotonic() - started < 60  # (the 120 s timeout: far from a loaded 410)
    _configmap(core, namespace, "after-gone", OURS)
    informer._list()
    assert informer.keys() == [(namespace, "after-gone")]
    assert informer.synced.is_set()
