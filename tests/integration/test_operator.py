"""The real operator, running as its own ServiceAccount, against the local control plane."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import signal
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    SAMPLES,
    WRITE_VERBS,
    apply,
    condition,
    container,
    deployment_reads,
    get,
    items,
    quiet_window,
    ready,
    sample,
    wait_for,
    wait_reconciled,
)
from vllm_localenv.cluster import AUDITED_NAMESPACE, LocalCluster
from vllm_localenv.operator_process import OPERATOR_NAMESPACE, OperatorProcess
from vllm_operator.runtime.informer import MANAGED_SELECTOR

pytestmark = pytest.mark.cluster
SELECTOR = "serving.vllm-operator.dev/service"


def wait_ready(
    cluster: LocalCluster, namespace: str, name: str, timeout: float = 300
) -> dict[str, Any]:
    return dict(wait_for(f"{name} Ready", lambda: ready(cluster, namespace, name), timeout))


# the simulated cluster's nodes are GPU nodes; the CPU sample has its own test below (and runs
# for real on the real node: tests/node)
GPU_SAMPLES = sorted(
    p.stem
    for p in SAMPLES.glob("*.yaml")
    if sample(p.stem)["spec"].get("resources", {}).get("gpus", 1) > 0
)


@pytest.mark.parametrize("name", GPU_SAMPLES)
def test_every_sample_becomes_ready_with_its_children(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str, name: str
) -> None:
    apply(cluster, namespace, SAMPLES / f"{name}.yaml")
    svc = wait_ready(cluster, namespace, name)
    spec = svc["spec"]
    dep = get(cluster, namespace, "deployment", name)
    assert dep is not None
    c = container(dep)
    assert c["args"][c["args"].index("--port") + 1] == str(spec["port"])
    assert c["resources"]["limits"]["nvidia.com/gpu"] == str(spec["resources"]["gpus"])
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    assert dep["metadata"]["ownerReferences"][0]["uid"] == svc["metadata"]["uid"]
    pods = items(
        cluster, namespace, "pods", f"app.kubernetes.io/name=vllm,app.kubernetes.io/instance={name}"
    )
    assert pods
    assert all(p["status"]["phase"] == "Running" for p in pods)
    assert all(p["spec"]["nodeName"].startswith("gpu-node-") for p in pods)
    service = get(cluster, namespace, "service", name)
    assert service is not None
    assert service["spec"]["ports"][0]["port"] == spec["port"]
    hpa = get(cluster, namespace, "hpa", name)
    assert (hpa is not None) == spec["autoscaling"]["enabled"]
    status = svc["status"]
    assert status["endpoint"] == f"http://{name}.{namespace}.svc.cluster.local:{spec['port']}/v1"
    assert status["readyReplicas"] == status["replicas"] == len(pods)


def test_cpu_sample_renders_a_pod_without_gpus(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    manifest = sample("tiny-cpu")
    # the simulated nodes run any pod that tolerates their taint; the claim of the sample does
    # not exist here, so the model comes from the image instead
    manifest["spec"]["model"] = {"path": "/opt/model", "servedModelName": "tiny"}
    kwok = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
    manifest["spec"]["tolerations"] = [kwok]
    apply(cluster, namespace, manifest)
    wait_ready(cluster, namespace, "tiny-cpu")
    dep = get(cluster, namespace, "deployment", "tiny-cpu")
    assert dep is not None
    c = container(dep)
    assert c["resources"] == {
        "requests": {"cpu": "1", "memory": "5Gi"},
        "limits": {"cpu": "1", "memory": "5Gi"},
    }
    assert "vllm-cpu" in c["image"]  # the operator's CPU image setting
    pairs = dict(itertools.pairwise(c["args"]))
    assert "--gpu-memory-utilization" not in c["args"]
    assert pairs["--kv-cache-memory-bytes"] == str(2**30)
    assert pairs["--block-size"] == "32"
    host_ip = {"apiVersion": "v1", "fieldPath": "status.podIP"}
    assert {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": host_ip}} in c["env"]
    pod_spec = dep["spec"]["template"]["spec"]
    assert pod_spec["tolerations"] == [kwok]  # no GPU toleration added
    assert "nodeSelector" not in pod_spec
    # what the operator renders is what the API server keeps (the fieldRef's defaulted
    # apiVersion, the limits): a resync writes nothing, over two whole drift-timer reconciles
    # that the audit log shows ran (the positive control: with no operator the wait fails)
    mine = quiet_window(cluster, operator.username, namespace, ["tiny-cpu"], reconciles=2)
    writes = [(e["verb"], e["objectRef"]) for e in mine if e["verb"] in WRITE_VERBS]
    assert writes == []


def test_tinyllama_reference_children(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, sample("tinyllama"))
    wait_ready(cluster, namespace, "tinyllama")
    dep = get(cluster, namespace, "deployment", "tinyllama")
    assert dep is not None
    args = container(dep)["args"]
    pairs = dict(itertools.pairwise(args))
    assert pairs["--served-model-name"] == "chat-1b"
    assert pairs["--max-model-len"] == "2048"  # TinyLlama's context (the lab says 4096)
    assert pairs["--gpu-memory-utilization"] == "0.85"
    assert pairs["--block-size"] == "16"
    assert pairs["--max-num-seqs"] == "256"
    assert "--swap-space" not in args  # gone from vLLM 0.32
    assert "--enable-prefix-caching" in args
    assert "--enable-log-requests" not in args
    assert dep["spec"]["replicas"] == 2  # the HPA's minReplicas
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    hpa = get(cluster, namespace, "hpa", "tinyllama")
    assert hpa is not None
    metric = hpa["spec"]["metrics"][0]["pods"]
    assert metric["metric"]["name"] == "vllm_operator:queue_depth_band"
    assert metric["target"]["averageValue"] == "20"
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 16)
    assert get(cluster, namespace, "pdb", "tinyllama") is not None


def test_spec_update_rolls_out_and_is_observed(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, sample("minimal"))
    before = wait_ready(cluster, namespace, "minimal")
    cluster.kubectl(
        "patch",
        "vsvc",
        "minimal",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"engine": {"maxNumSeqs": 64}}}),
    )
    after = wait_ready(cluster, namespace, "minimal")
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert after["status"]["observedGeneration"] == after["metadata"]["generation"]
    pods = items(
        cluster, namespace, "pods", "app.kubernetes.io/name=vllm,app.kubernetes.io/instance=minimal"
    )
    running = [
        p
        for p in pods
        if p["status"]["phase"] == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    assert running
    assert all("64" in p["spec"]["containers"][0]["args"] for p in running)
    events = items(cluster, namespace, "events")
    reasons = {e["reason"] for e in events if e["involvedObject"]["kind"] == "VLLMService"}
    assert "Ready" in reasons


def test_deleting_the_service_garbage_collects_children(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, sample("tinyllama"))
    wait_ready(cluster, namespace, "tinyllama")
    cluster.kubectl("delete", "vsvc", "tinyllama", "-n", namespace, "--wait=true")

    def gone() -> bool:
        return all(
            not items(cluster, namespace, kind, f"{SELECTOR}=tinyllama")
            for kind in ("deployments", "services", "hpa", "pdb", "replicasets")
        )

    wait_for("children to be garbage-collected", gone)


def test_switching_autoscaling_off_prunes_the_hpa_and_keeps_replicas(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, sample("tinyllama"))
    wait_ready(cluster, namespace, "tinyllama")
    # the HPA owns replicas: a change it makes is not reverted by the operator, through two
    # whole reconciles of the scaled Deployment (the audit log's evidence that they ran)
    cluster.kubectl("scale", "deployment", "tinyllama", "-n", namespace, "--replicas=3")
    wait_reconciled(cluster, operator.username, namespace, ["tinyllama"], 2, time.time())
    dep = get(cluster, namespace, "deployment", "tinyllama")
    assert dep is not None
    assert dep["spec"]["replicas"] == 3
    cluster.kubectl(
        "patch",
        "vsvc",
        "tinyllama",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"autoscaling": {"enabled": False}, "replicas": 1}}),
    )
    wait_for(
        "the HPA and PDB to be pruned",
        lambda: (
            get(cluster, namespace, "hpa", "tinyllama") is None
            and get(cluster, namespace, "pdb", "tinyllama") is None
        ),
    )
    svc = wait_ready(cluster, namespace, "tinyllama")
    # switching autoscaling off keeps the count the HPA chose until spec.replicas changes
    # (README, the children table; tests/integration/test_autoscaling_off.py goes on from here)
    assert svc["status"]["replicas"] == 3


def test_kubectl_scale_sets_the_replicas(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, sample("minimal"))
    wait_ready(cluster, namespace, "minimal")
    cluster.kubectl("scale", "vsvc", "minimal", "-n", namespace, "--replicas=3")
    svc = wait_for(
        "3 ready replicas",
        lambda: (
            (s := ready(cluster, namespace, "minimal")) and s["status"]["readyReplicas"] == 3 and s
        ),
    )
    assert (
        svc["status"]["selector"]
        == "app.kubernetes.io/instance=minimal,app.kubernetes.io/name=vllm"
    )
    pdb = wait_for("a PDB for 3 replicas", lambda: get(cluster, namespace, "pdb", "minimal"))
    assert pdb["spec"]["maxUnavailable"] == 1


def test_drift_is_restored(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, sample("minimal"))
    wait_ready(cluster, namespace, "minimal")
    cluster.kubectl(
        "patch",
        "deployment",
        "minimal",
        "-n",
        namespace,
        "--type=json",
        "-p",
        json.dumps(
            [
                {
                    "op": "replace",
                    "path": "/spec/template/spec/containers/0/image",
                    "value": "evil/image:latest",
                }
            ]
        ),
    )
    cluster.kubectl("delete", "service", "minimal", "-n", namespace)

    def restored() -> bool:
        dep = get(cluster, namespace, "deployment", "minimal")
        return bool(
            dep
            and container(dep)["image"] == "vllm/vllm-openai:v0.32.0"
            and get(cluster, namespace, "service", "minimal")
        )

    wait_for("the edited Deployment and the deleted Service to be restored", restored)
    cluster.kubectl("delete", "deployment", "minimal", "-n", namespace)
    wait_for(
        "the deleted Deployment to be recreated",
        lambda: (
            (d := get(cluster, namespace, "deployment", "minimal"))
            and not d["metadata"].get("deletionTimestamp")
        ),
    )
    wait_ready(cluster, namespace, "minimal")


def test_invalid_spec_is_reported_and_nothing_is_applied(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    bad = sample("minimal")
    bad["metadata"]["name"] = "bad-env"
    # valueFrom is free-form in the schema (it mirrors the Pod API): the operator checks it
    bad["spec"]["env"] = [{"name": "X", "valueFrom": {"bogusRef": {"name": "y"}}}]
    apply(cluster, namespace, bad)

    def invalid() -> dict[str, Any]:
        return condition(get(cluster, namespace, "vllmservice", "bad-env"), "Ready")

    c = wait_for(
        "Ready=False/InvalidSpec", lambda: (x := invalid()).get("reason") == "InvalidSpec" and x
    )
    assert c["status"] == "False"
    assert "spec.env" in c["message"]
    assert "valueFrom" in c["message"]
    assert get(cluster, namespace, "deployment", "bad-env") is None
    assert get(cluster, namespace, "service", "bad-env") is None
    # events are posted beside the reconciles, a moment after the status write
    wait_for(
        "a Warning InvalidSpec event",
        lambda: any(
            e["reason"] == "InvalidSpec" and e["type"] == "Warning"
            for e in items(cluster, namespace, "events")
        ),
    )
    # fixing the spec recovers without any manual step
    cluster.kubectl(
        "patch",
        "vsvc",
        "bad-env",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"env": [{"name": "X", "value": "1"}]}}),
    )
    wait_ready(cluster, namespace, "bad-env")


def _requests_by(audit_log: Path, username: str, since: float) -> list[dict[str, Any]]:
    """The API server's own record of what `username` did after `since` (epoch seconds)."""
    out = []
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") != username:
            continue
        stamp = dt.datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00"))
        if stamp.timestamp() >= since:
            out.append(event)
    return out


def test_a_no_op_resync_makes_zero_writes(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    names = ("minimal", "tinyllama", "llama3-8b", "empty-values")
    for name in names[:3]:
        apply(cluster, namespace, SAMPLES / f"{name}.yaml")
    # values the API server omits (EnvVar.value and Toleration.value are omitempty): the
    # live object lacks them, which must not read as drift (a patch and an event every resync)
    empty = sample("minimal")
    empty["metadata"]["name"] = "empty-values"
    empty["spec"]["env"] = [{"name": "EMPTY_SETTING", "value": ""}]
    empty["spec"]["tolerations"] = [
        {"key": "example.com/dedicated", "operator": "Equal", "value": "", "effect": "NoSchedule"}
    ]
    apply(cluster, namespace, empty)
    for name in names:
        wait_ready(cluster, namespace, name)

    def hpa_evaluated() -> bool:  # the HPA's first verdict is a real change of the status
        svc = get(cluster, namespace, "vsvc", "tinyllama") or {}
        conds = {c["type"]: c for c in svc.get("status", {}).get("conditions", [])}
        active = conds.get("AutoscalingActive", {})
        return active.get("reason") not in (None, "Pending", "HorizontalPodAutoscalerMissing")

    wait_for("tinyllama's HPA to be evaluated", hpa_evaluated)
    # the in-flight work settles, then at least three drift-timer runs per service, each seen
    # in the audit log (the reconciles did run in that window: each read its Deployment)
    mine = quiet_window(cluster, operator.username, namespace, names, reconciles=3)
    writes = [e for e in mine if e["verb"] in WRITE_VERBS]
    assert writes == [], [(w["verb"], w["objectRef"]) for w in writes]
    reads = deployment_reads(mine)
    assert all(reads[n] >= 3 for n in names), reads


def _logged_past(cluster: LocalCluster, namespace: str, mark: str, since: float) -> None:
    """Annotates `namespace` with `mark` and waits until the audit log records it: every
    request that completed before `since` is logged by then (the API server writes each event
    as its request completes, before answering)."""
    key = "test.vllm-operator.dev/audit-mark"
    cluster.kubectl("annotate", "namespace", namespace, f"{key}={mark}", "--overwrite")

    def logged() -> bool:
        for line in cluster.audit_log.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
            except ValueError:  # a line still being written
                continue
            ref = e.get("objectRef", {})
            if (
                e.get("verb") == "patch"
                and ref.get("resource") == "namespaces"
                and ref.get("name") == namespace
                and dt.datetime.fromisoformat(
                    e["stageTimestamp"].replace("Z", "+00:00")
                ).timestamp()
                >= since
            ):
                return True
        return False

    wait_for(f"the audit log to record the mark {mark}", logged)


def _in_flight(events: list[dict[str, Any]], names: list[str]) -> list[str]:
    """The services whose reconcile had begun writing (a child of theirs created or patched)
    and had not written their status yet: reconciles in flight."""
    started, finished = set(), set()
    for e in events:
        ref = e.get("objectRef", {})
        if e.get("verb") not in ("create", "patch", "update"):
            continue
        name = ref.get("name", "")
        if ref.get("resource") == "vllmservices" and ref.get("subresource") == "status":
            finished.add(name)
        elif ref.get("resource") in ("deployments", "services") and name in names:
            started.add(name)
    return sorted(started - finished)


def test_operator_killed_mid_reconcile_converges_without_duplicates(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    """SIGKILL while reconciles are writing, proved by the API server's audit log: at the
    kill, some service had a child written and no status yet. Then the restarted operator
    converges with exactly one Deployment (one ReplicaSet: no second rollout), one Service."""
    names: list[str] = []
    evidence: list[str] = []
    for attempt in range(3):  # the kill must land inside a reconcile: tried up to 3 times
        batch = [f"svc-{attempt}-{i}" for i in range(6)]
        since = time.time()
        offset = cluster.audit_log.stat().st_size  # poll only what is logged from now on
        for name in batch:
            m = sample("minimal")
            m["metadata"]["name"] = name
            apply(cluster, namespace, m)
        names += batch

        def first_write(batch: list[str] = batch, offset: int = offset) -> bool:
            with cluster.audit_log.open("rb") as f:
                f.seek(offset)
                lines = f.read().decode(errors="replace").splitlines()
            for line in lines:
                try:
                    e = json.loads(line)
                except ValueError:  # a line still being written
                    continue
                ref = e.get("objectRef", {})
                if (
                    e.get("user", {}).get("username") == operator.username
                    and e.get("verb") in ("create", "patch")
                    and ref.get("resource") in ("deployments", "services")
                    and ref.get("name") in batch
                ):
                    return True
            return False

        wait_for("the operator's first child write", first_write, every=0.02)
        operator.stop(sig=signal.SIGKILL)
        killed_at = time.time()
        # the audit log is written as requests complete: what it holds up to the kill, once a
        # write of the test's own, sent after the kill, is in it
        _logged_past(cluster, namespace, f"kill-{attempt}", killed_at)
        events = [
            e
            for e in _requests_by(cluster.audit_log, operator.username, since)
            if dt.datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")).timestamp()
            <= killed_at
        ]
        evidence = _in_flight(events, batch)
        operator.start()
        if evidence:
            break
    assert evidence, "no attempt killed the operator while a reconcile was writing"
    for name in names:
        wait_ready(cluster, namespace, name)
    deployments = items(cluster, namespace, "deployments")
    assert sorted(d["metadata"]["name"] for d in deployments) == sorted(names)
    replicasets = items(cluster, namespace, "replicasets")
    assert len(replicasets) == len(names)  # no second rollout from a duplicate apply
    services = items(cluster, namespace, "services")
    assert sorted(s["metadata"]["name"] for s in services) == sorted(names)


def test_liveness_endpoint(operator: OperatorProcess) -> None:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{operator.liveness_port}/healthz", timeout=30
    ) as r:
        assert r.status == 200


def _scrape(operator: OperatorProcess) -> dict[str, float]:
    """The operator's /metrics as {"name{labels}": value}."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=30
    ) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_operator_metrics_queue_duration_and_requests_by_verb(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    before = _scrape(operator)
    apply(cluster, namespace, sample("minimal"))
    wait_ready(cluster, namespace, "minimal")
    count = "vllm_operator_reconcile_duration_seconds_count"
    # a reconcile's duration is observed once it has returned, a moment after its status write
    after: dict[str, float] = wait_for(
        "a reconcile's duration observed",
        lambda: (a := _scrape(operator)).get(count, 0) > before.get(count, 0) and a,
    )

    def grew(key: str) -> float:
        return after.get(key, 0) - before.get(key, 0)

    assert grew(count) >= 1
    assert "vllm_operator_workqueue_depth" in after
    # the children were written (server-side apply), the service read fresh, the status set
    assert grew('vllm_operator_api_requests_total{verb="patch"}') >= 3
    assert grew('vllm_operator_api_requests_total{verb="get"}') >= 1
    # the child watches listed once and watch (not counted again per reconcile)
    assert after.get('vllm_operator_api_requests_total{verb="list"}', 0) >= 1
    assert after.get('vllm_operator_api_requests_total{verb="watch"}', 0) >= 1
    assert after.get('vllm_operator_watch_events_total{kind="Deployment"}', 0) >= 1


def test_a_standby_watches_only_what_it_owns_and_writes_nothing(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """A second replica, as an audited ServiceAccount with the operator's RBAC, competing for
    the session operator's Lease: it stands by. The audit log shows its child watches (the
    positive control that it ran), each with the server-side label selector, and no write."""
    account = f"standby-{namespace[-6:]}"
    cluster.kubectl("create", "namespace", AUDITED_NAMESPACE, check=False)
    cluster.kubectl("create", "serviceaccount", account, "-n", AUDITED_NAMESPACE)
    subject = f"--serviceaccount={AUDITED_NAMESPACE}:{account}"
    cluster.kubectl("create", "clusterrolebinding", account, "--clusterrole=vllm-operator", subject)
    cluster.kubectl(
        "create",
        "rolebinding",
        account,
        "-n",
        OPERATOR_NAMESPACE,
        "--role=vllm-operator-leader-election",
        subject,
    )
    kubeconfig = cluster.service_account_kubeconfig(
        AUDITED_NAMESPACE, account, tmp_path / "audited-account.kubeconfig"
    )
    standby = OperatorProcess(
        cluster,
        tmp_path / "standby.log",
        extra_env={"KUBECONFIG": str(kubeconfig), "VLLM_OPERATOR_NAMESPACES": namespace},
    )
    user = f"system:serviceaccount:{AUDITED_NAMESPACE}:{account}"
    since = time.time()
    standby.start()
    try:
        apply(cluster, namespace, sample("minimal"))
        wait_ready(cluster, namespace, "minimal")  # the session operator, the leader, did it
        wanted = {
            "deployments",
            "services",
            "horizontalpodautoscalers",
            "poddisruptionbudgets",
            "jobs",
            "configmaps",
            "pods",
        }

        def child_watches() -> list[dict[str, Any]]:
            seen = [
                e
                for e in _requests_by(cluster.audit_log, user, since)
                if e.get("objectRef", {}).get("namespace") == namespace
            ]
            watched = {e["objectRef"]["resource"] for e in seen if e["verb"] == "watch"}
            return seen if wanted <= watched else []

        mine = wait_for("the standby's child watches", child_watches)
        children = [e for e in mine if e["objectRef"]["resource"] in wanted]
        assert {e["verb"] for e in children} == {"list", "watch"}
        selectors = {
            tuple(
                urllib.parse.parse_qs(urllib.parse.urlsplit(e["requestURI"]).query).get(
                    "labelSelector", []
                )
            )
            for e in children
        }
        assert selectors == {(MANAGED_SELECTOR,)}
        writes = [
            (e["verb"], e.get("objectRef", {}).get("resource"))
            for e in _requests_by(cluster.audit_log, user, since)
            if e["verb"] in ("create", "update", "patch", "delete")
            and e.get("objectRef", {}).get("resource") != "leases"
        ]
        assert writes == []
        assert "minimal" not in standby.log_path.read_text()  # it reconciled nothing
    finally:
        standby.stop()
        cluster.kubectl("delete", "clusterrolebinding", account, check=False)
        cluster.kubectl("delete", "rolebinding", account, "-n", OPERATOR_NAMESPACE, check=False)
        cluster.kubectl("delete", "serviceaccount", account, "-n", AUDITED_NAMESPACE, check=False)
