"""Least privilege that is true: the operator runs under exactly the chart's RBAC (namespaced
mode: Roles in two watched namespaces, nothing cluster-scoped; cluster-wide: the ClusterRole,
which a unit test holds equal to deploy/rbac.yaml), drives services through every path that
makes a request (create, rollout, the benchmark Job and its account, a superseded run, a
finished run, history pruning, autoscaling and monitoring switched on and off, scaling, a
second namespace, an old finalizer removed, deletion), and the API server's audit log shows
no request refused by RBAC.

The audit log records every request of the ServiceAccounts in `AUDITED_NAMESPACE` (reads,
watches and refusals too: vllm_localenv/cluster.py), so "no refusal" is evidence; the positive
control shows the same log catches one: with `create` taken from its Role, the operator's
server-side apply of a new Role is refused (apply needs `create` besides `patch`) and the
status says so. In namespaced mode no request reaches a namespace it does not watch or
anything cluster-scoped, while the audit shows it busy in the others. Every granted
permission is used by the run, except the few the test names with their reason.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chart_support import find, template
from tests.integration.test_chart import ChartOperator
from tests.support import condition, get, ready, sample, wait_for
from vllm_localenv.cluster import AUDITED_NAMESPACE, EXIT_LABEL, REPO_ROOT, LocalCluster
from vllm_localenv.operator_process import install

pytestmark = [pytest.mark.cluster, pytest.mark.helm]
PROM_CRDS = REPO_ROOT / "tests" / "data" / "prometheus-operator-crds"
RBAC_KINDS = {
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
# server-side apply is a PATCH (the audit's verb); creating through it also needs `create`,
# which the API server checks inside that request: it never shows as a verb of its own
INVISIBLE = {"create"}


@pytest.fixture(scope="module")
def prepared(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The CRDs (VLLMService, the Prometheus Operator's for the monitoring
    children) and the audited namespace; the Prometheus CRDs go again at the end."""
    install(cluster)
    files = sorted(PROM_CRDS.glob("*.yaml"))
    for f in files:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
    cluster.wait_crds_established(
        "prometheusrules.monitoring.coreos.com", "podmonitors.monitoring.coreos.com"
    )
    cluster.kubectl("create", "namespace", AUDITED_NAMESPACE, check=False)
    yield cluster
    for f in files:
        cluster.kubectl("delete", "-f", str(f), "--ignore-not-found", "--wait=true")


def create_namespace(cluster: LocalCluster, name: str) -> str:
    cluster.kubectl("create", "namespace", name)
    return name


def rbac_objects(values: dict[str, Any], release: str) -> tuple[list[dict[str, Any]], Any]:
    """The chart's RBAC, ServiceAccount and Lease Role, and its operator Deployment."""
    docs = template(values, release=release, namespace=AUDITED_NAMESPACE)
    return [d for d in docs if d["kind"] in RBAC_KINDS], find(docs, "Deployment")


def requests_of(cluster: LocalCluster, username: str, since: float) -> list[dict[str, Any]]:
    """Every request `username` made after `since` (epoch seconds), one audit event each
    (a watch logs when its response starts and when it ends: the final stage is kept)."""
    out = []
    for line in cluster.audit_log.read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") != username:
            continue
        if event.get("stage") == "ResponseStarted":
            continue
        stamp = dt.datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00"))
        if stamp.timestamp() >= since:
            out.append(event)
    return out


def refused_by_rbac(event: dict[str, Any]) -> bool:
    """A 403 of the authorizer ('User "..." cannot patch resource ...'), also the one inside
    a server-side apply that creates; not the 403 of a namespace being deleted ('unable to
    create new content'), which a reconcile of a service in a terminating namespace meets."""
    status = event.get("responseStatus", {})
    return status.get("code") == 403 and " cannot " in status.get("message", "")


def resource_of(event: dict[str, Any]) -> str:
    ref = event.get("objectRef", {})
    sub = ref.get("subresource")
    return f"{ref.get('resource')}/{sub}" if sub else str(ref.get("resource"))


def described(event: dict[str, Any]) -> str:
    ref = event.get("objectRef", {})
    where = ref.get("namespace") or "(cluster)"
    return f"{event['verb']} {resource_of(event)} {ref.get('name') or ''} in {where}"


def granted(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(resource, verb) pairs the chart's Roles/ClusterRole grant."""
    return {
        (res, verb)
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
        for rule in o["rules"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }


def service(name: str, **spec: Any) -> dict[str, Any]:
    m = sample("minimal")
    m["metadata"]["name"] = name
    m["spec"].update(spec)
    return m


def apply(cluster: LocalCluster, namespace: str, manifest: dict[str, Any]) -> None:
    cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=test",
        "-n",
        namespace,
        "-f",
        "-",
        stdin=json.dumps(manifest),
    )


def ready_at(cluster: LocalCluster, namespace: str, name: str, generation: int) -> Any:
    svc = ready(cluster, namespace, name)
    return svc if svc and svc["metadata"]["generation"] >= generation else None


def bench_job(cluster: LocalCluster, namespace: str, name: str, generation: int) -> Any:
    svc = wait_for(
        f"{name} Ready at generation {generation}",
        lambda: ready_at(cluster, namespace, name, generation),
    )
    job = f"{name}-bench-{svc['status']['revision'][:8]}"
    return wait_for(f"job {job}", lambda: get(cluster, namespace, "job", job))


def finish_run(
    cluster: LocalCluster,
    namespace: str,
    job: dict[str, Any],
    tmp: Path,
    tps: float | None = None,
    *,
    try_relabel: bool = False,
) -> None:
    """What the runner does at the end, as the Job's own ServiceAccount: publish a result
    into the run's ConfigMap (the only object its Role names); then the pod exits 0. `tps`:
    the headline output tokens per second the result carries (None: no headline).
    `try_relabel`: first, as that account, move the result to another revision by its label,
    which the admission policy refuses (issue 32, item 7); the data patch after it passes."""
    pod = job["spec"]["template"]["spec"]
    kubeconfig = cluster.service_account_kubeconfig(
        namespace, pod["serviceAccountName"], tmp / "job.kubeconfig"
    )
    if try_relabel:
        moved = {"metadata": {"labels": {"serving.vllm-operator.dev/revision": "0123456789"}}}
        res = subprocess.run(
            [
                str(cluster.bin_dir / "kubectl"),
                f"--kubeconfig={kubeconfig}",
                "patch",
                "configmap",
                job["metadata"]["name"],
                "-n",
                namespace,
                "--type=merge",
                "-p",
                json.dumps(moved),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert res.returncode != 0, "the run's account moved its result to another revision"
        assert "ValidatingAdmissionPolicy" in res.stderr, res.stderr
    result: dict[str, Any] = {"status": "ok", "finishedAt": "2026-11-30T00:00:00Z", "scenarios": {}}
    if tps is not None:
        result["headline"] = {"outputTokensPerSecond": tps}
    patch = {"data": {"result.json": json.dumps(result)}}
    cluster.kubectl(
        f"--kubeconfig={kubeconfig}",
        "patch",
        "configmap",
        job["metadata"]["name"],
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps(patch),
    )
    for p in json.loads(
        cluster.kubectl(
            "get",
            "pods",
            "-n",
            namespace,
            "-l",
            f"job-name={job['metadata']['name']}",
            "-o",
            "json",
        )
    )["items"]:
        cluster.kubectl(
            "label",
            "pod",
            p["metadata"]["name"],
            "-n",
            namespace,
            f"{EXIT_LABEL}=0",
            "--overwrite",
        )


def as_account(
    cluster: LocalCluster, kubeconfig: Path, obj: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """A server-side dry-run create of `obj` with the account of `kubeconfig`."""
    return subprocess.run(
        [
            str(cluster.bin_dir / "kubectl"),
            f"--kubeconfig={kubeconfig}",
            "create",
            "--dry-run=server",
            "-f",
            "-",
        ],
        input=json.dumps(obj),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def check_admission_policies(cluster: LocalCluster, kubeconfig: Path, namespace: str) -> None:
    labels = {"app": "intruder"}
    pod: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "intruder", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    # the control: an ordinary Deployment passes (RBAC allows it, the policies too)
    ok = as_account(cluster, kubeconfig, deployment)
    assert ok.returncode == 0, ok.stderr
    variants = {
        "another account": {"serviceAccountName": "admin"},
        "privileged": {
            "containers": [
                {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}
            ]
        },
        "hostPath": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]},
        "hostNetwork": {"hostNetwork": True},
    }
    for what, change in variants.items():
        bad = copy.deepcopy(deployment)
        bad["spec"]["template"]["spec"].update(change)
        res = as_account(cluster, kubeconfig, bad)
        assert res.returncode != 0, what
        assert "ValidatingAdmissionPolicy" in res.stderr, f"{what}: {res.stderr}"
    # a Role the operator could grant (it holds list on ConfigMaps) but never renders
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "intruder", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
    }
    res = as_account(cluster, kubeconfig, role)
    assert res.returncode != 0
    assert "ValidatingAdmissionPolicy" in res.stderr, res.stderr
    # EndpointSlices (a bake's): only a service's own canary pod, in one slice of its name
    endpoint = {
        "addresses": ["10.0.0.7"],
        "targetRef": {"kind": "Pod", "namespace": namespace, "name": "web-canary-5d9c-x1"},
    }
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "web-canary-bake",
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": "web",
                "endpointslice.kubernetes.io/managed-by": "vllm-operator.serving.vllm-operator.dev",
            },
            "ownerReferences": [_owner("web")],
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
        "endpoints": [endpoint],
    }
    ok = as_account(cluster, kubeconfig, slice_)
    assert ok.returncode == 0, ok.stderr  # the control: what a bake writes passes
    other_pod = {**endpoint, "targetRef": {**endpoint["targetRef"], "name": "database-0"}}
    slice_variants: dict[str, dict[str, Any]] = {
        "another name": {"metadata": {**slice_["metadata"], "name": "web-extra"}},
        "another service": {
            "metadata": {
                **slice_["metadata"],
                "labels": {**slice_["metadata"]["labels"], "kubernetes.io/service-name": "db"},
            }
        },
        "not the operator's manager": {
            "metadata": {
                **slice_["metadata"],
                "labels": {"kubernetes.io/service-name": "web"},
            }
        },
        "a pod that is not the canary's": {"endpoints": [other_pod]},
        "no pod at all": {"endpoints": [{"addresses": ["192.0.2.1"]}]},
        "two endpoints": {"endpoints": [endpoint, endpoint]},
        # (issue 32, item 7) a Service the operator does not serve, addresses and ports
        "not owned by the VLLMService of its Service": {
            "metadata": {**slice_["metadata"], "ownerReferences": [_owner("db")]}
        },
        "not owned at all": {
            "metadata": {k: v for k, v in slice_["metadata"].items() if k != "ownerReferences"}
        },
        "two addresses": {"endpoints": [{**endpoint, "addresses": ["10.0.0.7", "10.0.0.8"]}]},
        "two ports": {
            "ports": [
                {"name": "http", "port": 8000, "protocol": "TCP"},
                {"name": "ssh", "port": 22, "protocol": "TCP"},
            ]
        },
        "a UDP port": {"ports": [{"name": "http", "port": 8000, "protocol": "UDP"}]},
    }
    for what, change in slice_variants.items():
        res = as_account(cluster, kubeconfig, {**slice_, **change})
        assert res.returncode != 0, what
        assert "ValidatingAdmissionPolicy" in res.stderr, f"{what}: {res.stderr}"
    # deletes: the operator deletes no slice but its own (the EndpointSlice controller's of
    # Service web here; the policy's own message proves it answered, not RBAC or a 404)
    foreign = {
        **slice_,
        "metadata": {
            "name": "web-abc12",
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": "web"},
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(foreign))
    other = delete_as_account(cluster, kubeconfig, namespace, "web-abc12")
    assert other.returncode != 0
    assert "ValidatingAdmissionPolicy" in other.stderr, other.stderr


def _owner(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "name": name,
        "uid": "00000000-0000-0000-0000-000000000001",
        "controller": True,
    }


def delete_as_account(
    cluster: LocalCluster, kubeconfig: Path, namespace: str, name: str
) -> subprocess.CompletedProcess[str]:
    """A server-side dry-run delete of EndpointSlice `name` with the account of `kubeconfig`."""
    return subprocess.run(
        [
            str(cluster.bin_dir / "kubectl"),
            f"--kubeconfig={kubeconfig}",
            "delete",
            "--dry-run=server",
            "-n",
            namespace,
            "endpointslice",
            name,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def benchmark_state(cluster: LocalCluster, namespace: str, name: str) -> str:
    svc = get(cluster, namespace, "vllmservice", name)
    return str(condition(svc, "BenchmarkComplete").get("status"))


def exists(cluster: LocalCluster, namespace: str, kind: str, name: str) -> bool:
    return get(cluster, namespace, kind, name) is not None


@pytest.mark.timeout(900)
@pytest.mark.usefixtures("no_other_operator")  # its requests are not the chart operator's
@pytest.mark.parametrize("mode", ["namespaced", "cluster-wide"])
def test_the_operator_needs_no_permission_beyond_the_charts(
    prepared: LocalCluster, tmp_path: Path, mode: str
) -> None:
    cluster = prepared
    tag = f"{mode[:2]}{int(time.time()) % 100000}"
    ns_a = create_namespace(cluster, f"lp-a-{tag}")
    ns_b = create_namespace(cluster, f"lp-b-{tag}")
    ns_off = create_namespace(cluster, f"lp-off-{tag}")
    release = f"lp-{mode[:2]}"
    values: dict[str, Any] = {"settings": {"fieldManager": release}}
    if mode == "namespaced":
        values["rbac"] = {"watchNamespaces": [ns_a, ns_b]}
    objects, deployment = rbac_objects(values, release)
    cluster.kubectl(
        "apply", "-f", "-", stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": objects})
    )
    op = ChartOperator(cluster, deployment, tmp_path / "operator.log")
    user = f"system:serviceaccount:{AUDITED_NAMESPACE}:{op.account}"
    since = time.time()
    op.start()
    try:
        # 1. a service with everything that comes and goes: HPA, PDB, monitoring objects
        t0 = time.monotonic()
        apply(
            cluster,
            ns_a,
            service(
                "lp",
                replicas=2,
                autoscaling={"enabled": True, "minReplicas": 2, "maxReplicas": 3},
                benchmark={"keepRuns": 1},
            ),
        )
        job1 = bench_job(cluster, ns_a, "lp", 1)
        first_ready_s = time.monotonic() - t0
        for kind in ("hpa", "pdb", "prometheusrule", "podmonitor"):
            assert exists(cluster, ns_a, kind, "lp"), kind
        # 2. a new revision while run 1 is still going: run 1 is superseded (its Job deleted);
        # autoscaling, the PDB (one replica) and monitoring switched off: pruned
        apply(
            cluster,
            ns_a,
            service(
                "lp",
                replicas=1,
                autoscaling={"enabled": False},
                monitoring={"enabled": False, "podMonitor": False},
                engine={"maxNumSeqs": 64},
                benchmark={"keepRuns": 1},
            ),
        )
        job2 = bench_job(cluster, ns_a, "lp", 2)
        assert job2["metadata"]["name"] != job1["metadata"]["name"]
        wait_for(
            "run 1's Job deleted",
            lambda: not exists(cluster, ns_a, "job", job1["metadata"]["name"]),
        )
        # 3. run 2 finishes: the operator reads its result, records it, prunes run 1
        finish_run(cluster, ns_a, job2, tmp_path)
        wait_for("run 2 complete", lambda: benchmark_state(cluster, ns_a, "lp") == "True")
        wait_for(
            "run 1 pruned (keepRuns: 1)",
            lambda: not exists(cluster, ns_a, "configmap", job1["metadata"]["name"]),
        )
        for kind in ("hpa", "pdb", "prometheusrule", "podmonitor"):
            wait_for(f"{kind} pruned", lambda k=kind: not exists(cluster, ns_a, k, "lp"))

        # 4. positive control: without `create` on Roles the benchmark's Role cannot be made
        # (server-side apply of a new object); the refusal shows in the audit and the status
        role_kind = "role" if mode == "namespaced" else "clusterrole"
        role_ns = ["-n", ns_b] if mode == "namespaced" else []
        role_name = deployment["metadata"]["name"]  # the chart's full name
        role = json.loads(cluster.kubectl("get", role_kind, role_name, *role_ns, "-o", "json"))
        index = next(
            i
            for i, r in enumerate(role["rules"])
            if "roles" in r["resources"] and "create" in r["verbs"]
        )
        without_create = [v for v in role["rules"][index]["verbs"] if v != "create"]
        cluster.kubectl(
            "patch",
            role_kind,
            role["metadata"]["name"],
            *role_ns,
            "--type=json",
            "-p",
            json.dumps(
                [{"op": "replace", "path": f"/rules/{index}/verbs", "value": without_create}]
            ),
        )
        apply(cluster, ns_b, service("lp-b"))
        refused = wait_for(
            "the refused Role in the audit log",
            lambda: [
                e
                for e in requests_of(cluster, user, since)
                if refused_by_rbac(e)
                and resource_of(e) == "roles"
                and e["objectRef"].get("namespace") == ns_b
            ],
        )
        # (on the benchmark's condition: a refused run's object never makes it un-Ready)
        # (one read per look: each retry writes the run "starting" before its refused Role,
        # so two reads can see the refusal and then that)
        status = wait_for(
            "the refusal in the status",
            lambda: (
                (
                    c := condition(get(cluster, ns_b, "vllmservice", "lp-b"), "BenchmarkComplete")
                ).get("reason")
                == "ApplyFailed"
                and c
            ),
        )
        assert "forbidden" in status["message"].lower(), status
        assert condition(get(cluster, ns_b, "vllmservice", "lp-b"), "Ready")["status"] == "True"
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": objects}),
        )
        control_end = time.time()
        bench_job(cluster, ns_b, "lp-b", 1)  # the retry succeeds once the verb is back

        # 5. a namespace the operator does not watch (namespaced mode): untouched
        apply(cluster, ns_off, service("lp-off"))
        apply(cluster, ns_b, service("lp-b2"))
        wait_for("lp-b2 Ready", lambda: ready(cluster, ns_b, "lp-b2"))

        # 6. the finalizer an early version (kopf's timer) left behind: the operator removes
        # it (a JSON patch that tests the list first) and keeps another controller's
        def patch_b2(kind: str, body: object) -> None:
            cluster.kubectl(
                "patch", "vllmservice", "lp-b2", "-n", ns_b, f"--type={kind}",
                "-p", json.dumps(body),
            )  # fmt: skip

        patch_b2(
            "merge",
            {"metadata": {"finalizers": ["example.com/keep", "vllm-operator.dev/finalizer"]}},
        )
        wait_for(
            "the old finalizer removed, the other kept",
            lambda: (
                (get(cluster, ns_b, "vllmservice", "lp-b2") or {})["metadata"].get("finalizers")
                == ["example.com/keep"]
            ),
        )
        patch_b2("json", [{"op": "remove", "path": "/metadata/finalizers"}])

        # 6b. a canary's bake (rollout.canary.bake): the EndpointSlice that puts the canary's
        # pod in the Service's endpoints is written once its benchmark passes, and pruned when
        # a newer spec supersedes it (no Prometheus here: the bake waits, and says so)
        gated = {"thresholds": {"minOutputTokensPerSecond": 1}, "keepRuns": 3}
        baked = {"canary": {"bake": {"seconds": 600}}}
        apply(cluster, ns_b, service("lp-bake", benchmark=gated, rollout=baked))
        finish_run(
            cluster,
            ns_b,
            bench_job(cluster, ns_b, "lp-bake", 1),
            tmp_path,
            tps=100,
            try_relabel=True,
        )
        wait_for(
            "lp-bake's run passed", lambda: benchmark_state(cluster, ns_b, "lp-bake") == "True"
        )
        for generation, seqs in ((2, 32), (3, 48)):
            apply(
                cluster,
                ns_b,
                service("lp-bake", benchmark=gated, rollout=baked, engine={"maxNumSeqs": seqs}),
            )
            if generation == 3:
                break
            canary_job = wait_for(
                "the canary's run",
                lambda: (
                    (r := (get(cluster, ns_b, "vllmservice", "lp-bake") or {}).get("status", {}))
                    .get("rollout", {})
                    .get("phase")
                    == "Canary"
                    and get(cluster, ns_b, "job", f"lp-bake-bench-{r['rollout']['revision'][:8]}")
                ),
            )
            finish_run(cluster, ns_b, canary_job, tmp_path, tps=100)
            wait_for(
                "the canary in the Service's endpoints",
                lambda: exists(cluster, ns_b, "endpointslice", "lp-bake-canary-bake"),
            )
        wait_for(
            "the superseded bake's EndpointSlice pruned",
            lambda: not exists(cluster, ns_b, "endpointslice", "lp-bake-canary-bake"),
        )

        # 7. the chart's admission policies: what RBAC lets the operator's account do and the
        # policies do not (server-side dry runs as that account: admission runs, nothing stays)
        check_admission_policies(cluster, tmp_path / "operator.kubeconfig", ns_b)

        # 8. deletion: garbage collection removes the children; the operator lets go
        deleted_at = time.time()
        cluster.kubectl("delete", "vllmservice", "lp", "-n", ns_a, "--wait=true")
        # a few drift-timer ticks (3 s) after the deletion, for the audit: the audit log shows
        # them (each reconcile reads its service fresh), not a pause
        left = ("lp-b", "lp-b2", "lp-bake")

        def ticks_after_deletion() -> bool:
            reads = [
                e["objectRef"].get("name")
                for e in requests_of(cluster, user, deleted_at)
                if e["verb"] == "get"
                and resource_of(e) == "vllmservices"
                and e["objectRef"].get("namespace") == ns_b
            ]
            return all(reads.count(n) >= 2 for n in left)

        wait_for("two drift-timer reconciles of each service left", ticks_after_deletion)
    finally:
        op.stop()
        cluster.kubectl(
            "delete",
            "-f",
            "-",
            "--ignore-not-found",
            "--wait=false",
            stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": objects}),
        )
        for ns in (ns_a, ns_b, ns_off):
            cluster.kubectl("delete", "namespace", ns, "--wait=false")

    events = requests_of(cluster, user, since)
    # nothing the operator itself sent was refused by the admission policies (the controls
    # above were kubectl's)
    denied = [
        described(e)
        for e in events
        if "ValidatingAdmissionPolicy" in e.get("responseStatus", {}).get("message", "")
        and not e.get("userAgent", "").startswith("kubectl")
    ]
    assert not denied, denied
    refusals = [e for e in events if refused_by_rbac(e)]
    expected = {described(e) for e in refused}
    unexpected = [described(e) for e in refusals if described(e) not in expected]
    late = [
        described(e)
        for e in refusals
        if dt.datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")).timestamp()
        > control_end + 5
    ]
    assert not unexpected, unexpected
    assert not late, late
    if mode == "namespaced":
        # nothing cluster-scoped (no namespace), nothing in ns_off; its own namespace: the Lease
        touched = {
            (e["objectRef"].get("namespace"), resource_of(e)) for e in events if e.get("objectRef")
        }
        assert {ns for ns, _ in touched} <= {ns_a, ns_b, AUDITED_NAMESPACE}, touched
        assert {r for ns, r in touched if ns == AUDITED_NAMESPACE} == {"leases"}, touched
    used = {(resource_of(e), e["verb"]) for e in events if e.get("objectRef")}
    grants = granted(objects)
    unused = sorted(
        f"{verb} {res}" for res, verb in grants if verb not in INVISIBLE and (res, verb) not in used
    )
    print(
        f"\n[{mode}] {len(events)} requests, {len(refusals)} refused (the control's), "
        f"first service Ready with its Job {first_ready_s:.1f}s after apply; "
        f"granted but unused in this run: {unused}"
    )
    # every grant was used, except: vllmservices/finalizers (needed only where the
    # OwnerReferencesPermissionEnforcement admission plugin runs; the local apiserver does not),
    # the CRD watch (cluster-wide: kopf's scan, when a CRD changes), and `get` of a kind the
    # operator watches (reads come from that watch's cache; a GET only while it resyncs)
    watched = {r for r, v in used if v == "watch"}
    allowed_unused = {
        f"{v} {r}"
        for r, v in grants
        if r.endswith("/finalizers")
        or r == "customresourcedefinitions"
        or (v == "get" and r in watched)
    }
    assert set(unused) <= allowed_unused, set(unused) - allowed_unused
    assert ("events", "create") in used  # POSTed, unlike the children
