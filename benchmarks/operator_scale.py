"""Fleet-scale benchmark of the operator on the local control plane (numbers, not assertions).

With the real operator running as its ServiceAccount, beside unrelated objects it does not own
(by default 10,000 ConfigMaps of 1 KiB and 1,000 Deployments with 0 replicas), it measures:

  * apply -> Ready=True for 1 service (several rounds);
  * a ladder of fleets (by default 10, then 100, then 1,000 services, each batch applied at
    once in its own namespace, on top of the earlier ones): per batch the apply call, Ready
    p50 / p95 / max and convergence (the operator's last write of the batch), then, with
    nothing changing, one or more resync intervals ("no-op resync") measured from outside:
    - the operator's CPU time (/proc/<pid>/stat utime+stime) and bytes it read (/proc/<pid>/io),
    - API requests by verb from the API server's audit log (the benchmark's cluster audits
      every request of the operator's ServiceAccount): writes (must be 0) and reads per
      service per resync,
    - the operator's own counters when it exports them (vllm_operator_api_requests_total by
      verb, vllm_operator_reconciles_total, the reconcile-duration histogram),
    - its resident memory;
  * the kind of list/watch requests the operator makes: per resource, scope and label selector,
    how many requests and how many objects that request's scope holds (what a list or the
    initial watch sends it);
  * where each batch's time to Ready goes (`rollout_stages_seconds`), from the API server's
    audit log: the operator's first Deployment write after the service's create, the
    Deployment and ReplicaSet controllers, the scheduler, kwok, the Deployment turning
    available, and the operator's status write that says Ready=True (its answer is audited,
    so Ready is timed at the API server, not when a watch delivers it); the operator's requests
    per service until then; and the CPU seconds each control-plane process and the operator
    spent (on two cores, who spends them decides how fast a fleet rolls out);
  * with `--baseline N`, first the control: N plain Deployments of the operator's pod template,
    each with a ClusterIP Service, created at once without the operator. Their time to
    available is the floor under the services' Ready time; the operator's share is the rest.

Machine load (`uptime`) is recorded beside every figure: on a shared machine it matters.

Usage:
  .venv/bin/python benchmarks/operator_scale.py [--ladder 10,100,1000]
      [--unrelated-configmaps 10000] [--unrelated-deployments 1000] [--resync 60]
      [--operator-source REV] [--label before] [--out benchmarks/results/operator/x.json]

`--result-bytes 366000` publishes, as each batch turns Ready, a runner-shaped result.json of
that size (a lab result's) into every run's result ConfigMap with state Complete: what each
benchmark Job would do, were kwok's pods real. Without it no service has a result.

`--controller-qps Q --controller-workers W` give kube-controller-manager the client rate and
the Deployment/ReplicaSet/Job workers of a control plane sized for fleets (its defaults, 20
requests/s and 5 workers each, alone take 20+ s to roll out 100 Deployments on this machine);
`--workers N` sets the operator's parallel reconciles (VLLM_OPERATOR_WORKERS).

`--operator-source REV` runs the operator (its code, CRDs and RBAC) as of a git revision,
extracted with `git archive`, instead of the working tree: a baseline that other engineers'
uncommitted edits cannot change. `--ladder 100 --unrelated-configmaps 0
--unrelated-deployments 0` is the earlier "100 services on an empty cluster" measurement.

It starts its own cluster in .state/bench-operator-scale on free ports (fake 64-GPU nodes, enough
for every service and its benchmark pod; a /16 service range, since a /24 holds only 254
ClusterIPs), without the metrics pipeline, and stops it at the end. Results of 2026-11-30:
benchmarks/results/operator/ (before.json and before-1000.json: the operator at 7ed28c4;
after.json: at aa87d14) and "The operator at fleet scale" (docs/fleet-scale.md).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from prometheus_client.parser import text_string_to_metric_families

from vllm_localenv.cluster import REPO_ROOT, GpuNode, LocalCluster, Ports
from vllm_localenv.operator_process import OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, OperatorProcess

GROUP, VERSION, PLURAL = "serving.vllm-operator.dev", "v1alpha1", "vllmservices"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
READ_VERBS = ("get", "list", "watch")
# replicas coordinating (a leader's Lease renewals; kopf peering of older revisions): writes by
# design, once per renewal whatever the fleet, so counted apart from writes to services
COORDINATION = (
    "kopf.dev/clusterkopfpeerings",
    "kopf.dev/kopfpeerings",
    "coordination.k8s.io/leases",
)
# audited for every user: the steps between the operator's Deployment and its Ready pod
ROLLOUT_CREATES = [
    {"group": "apps", "resources": ["replicasets"]},
    {"group": "", "resources": ["pods", "pods/binding"]},
    {"group": GROUP, "resources": [PLURAL]},
]
ROLLOUT_STATUS = [
    {"group": "", "resources": ["pods/status"]},
    {"group": "apps", "resources": ["deployments/status"]},
]
SERVICE_RANGE = "--service-cluster-ip-range=10.0.0.0/16"
RECONCILES_METRIC = "vllm_operator_reconciles_total"
STATE_DIR = REPO_ROOT / ".state" / "bench-operator-scale"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --no-benchmark: the services of the ladder do not benchmark their rollouts
BENCHMARK = {"enabled": True}


def manifest(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}}
    if not BENCHMARK["enabled"]:
        spec["benchmark"] = {"enabled": False}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VLLMService",
        "metadata": {"name": name},
        "spec": spec,
    }


# The audit policy of the benchmark's cluster: every request of the operator's ServiceAccount
# (reads included, so reads per resync and the operator's watch requests can be counted) and
# the rollout's stages; nothing else (the benchmark's own 11,000 creates would only fill the log).
AUDIT_RULES: list[dict[str, Any]] = [
    # the status writes with their answer: which one made a service Ready=True, at the API
    # server's clock (a watch can deliver it seconds later)
    {
        "level": "RequestResponse",
        "users": [OPERATOR_USER],
        "verbs": ["patch", "update"],
        "resources": [{"group": GROUP, "resources": [f"{PLURAL}/status"]}],
    },
    {
        "level": "RequestResponse",
        "verbs": ["update"],
        "resources": [{"group": "apps", "resources": ["deployments/status"]}],
    },
    {"level": "Metadata", "users": [OPERATOR_USER]},
    # the rollout of each service's pod, stage by stage (whose time is it?)
    {"level": "Metadata", "verbs": ["create"], "resources": ROLLOUT_CREATES},
    {"level": "Metadata", "verbs": ["update", "patch"], "resources": ROLLOUT_STATUS},
    {"level": "None"},
]


def bench_cluster(
    nodes: tuple[GpuNode, ...], controller_qps: int = 0, controller_workers: int = 0
) -> LocalCluster:
    """The local cluster of the benchmark: its audit policy (AUDIT_RULES), a service range
    for a fleet (a /24 holds 254 ClusterIPs), and kube-controller-manager sized as asked
    (0: its defaults, a 20 requests/s client and 5 Deployment / ReplicaSet / Job workers)."""
    controller: list[str] = []
    if controller_qps:  # its client's default 20 requests/s (burst 30) paces ReplicaSets, pods
        controller += [f"--kube-api-qps={controller_qps}", f"--kube-api-burst={2 * controller_qps}"]
    if controller_workers:  # 5 each by default: 100 new Deployments queue for their ReplicaSets
        controller += [
            f"--concurrent-{kind}-syncs={controller_workers}"
            for kind in ("deployment", "replicaset", "job")
        ]
    return LocalCluster(
        state_dir=STATE_DIR,
        ports=Ports.free(),
        nodes=nodes,
        monitoring=False,
        extra_args={"kube-apiserver": [SERVICE_RANGE], "kube-controller-manager": controller},
        audit_rules=AUDIT_RULES,
    )


@dataclass(frozen=True)
class Request:
    """One audited request of the operator (first stage seen of its auditID)."""

    t: float
    verb: str
    resource: str
    namespace: str | None
    uri: str


@dataclass(frozen=True)
class Step:
    """One audited write of the rollout pipeline, by anyone (ROLLOUT_CREATES/ROLLOUT_STATUS)."""

    t: float  # when the API server completed it
    user: str
    verb: str
    resource: str  # with its subresource: pods/binding, deployments/status
    namespace: str
    name: str


@dataclass
class AuditTail:
    """Reads the audit log incrementally; keeps the operator's requests and the rollout's
    steps in the fleet's namespaces."""

    path: Path
    requests: list[Request] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    _offset: int = 0
    _seen: set[str] = field(default_factory=set)

    def poll(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a partly written last line waits for the next poll
        self._offset += end
        for line in data[:end].splitlines():
            if b'"namespace":"fleet-' in line:
                self._step(json.loads(line))
            if OPERATOR_USER.encode() not in line:
                continue
            e = json.loads(line)
            if e.get("user", {}).get("username") != OPERATOR_USER or e["auditID"] in self._seen:
                continue
            self._seen.add(e["auditID"])
            ref = e.get("objectRef", {})
            t = dt.datetime.fromisoformat(
                e["requestReceivedTimestamp"].replace("Z", "+00:00")
            ).timestamp()
            resource = "/".join(x for x in (ref.get("apiGroup"), ref.get("resource")) if x)
            resource = resource or urllib.parse.urlsplit(e["requestURI"]).path  # discovery
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            self.requests.append(
                Request(t, e["verb"], resource, ref.get("namespace"), e["requestURI"])
            )

    def _step(self, e: dict[str, Any]) -> None:
        ref = e.get("objectRef", {})
        code = e.get("responseStatus", {}).get("code", 0)
        if e["verb"] not in WRITE_VERBS or not 200 <= code < 300 or not ref.get("name"):
            return
        resource = ref.get("resource", "") + (
            f"/{ref['subresource']}" if ref.get("subresource") else ""
        )
        t = dt.datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")).timestamp()
        answer = e.get("responseObject") or {}
        if resource == f"{PLURAL}/status" and service_ready(answer):
            resource += "/ready"  # this write's answer says Ready=True
        if resource == "deployments/status" and answer.get("status", {}).get("availableReplicas"):
            resource += "/available"
        self.steps.append(
            Step(t, e["user"]["username"], e["verb"], resource, ref["namespace"], ref["name"])
        )

    def between(self, since: float, until: float) -> list[Request]:
        self.poll()
        return [r for r in self.requests if since <= r.t < until]

    def last_write(self, exclude: tuple[str, ...] = ()) -> float | None:
        self.poll()
        return max(
            (r.t for r in self.requests if r.verb in WRITE_VERBS and r.resource not in exclude),
            default=None,
        )


def service_ready(obj: dict[str, Any]) -> bool:
    conds = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def deployment_available(obj: Any) -> bool:
    return bool(obj.status and (obj.status.available_replicas or 0) >= 1)


class ReadyWatcher:
    """Records, from a watch on VLLMServices, when each became Ready=True (with `plain`: on
    Deployments, when each had a pod available)."""

    def __init__(self, api: client.ApiClient, namespace: str, *, plain: bool = False) -> None:
        self.ready_at: dict[str, float] = {}
        self.ready_wall: dict[str, float] = {}
        self._api = client.CustomObjectsApi(api)
        self._apps = client.AppsV1Api(api)
        self._plain = plain
        self._namespace = namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()  # type: ignore[no-untyped-call]
            with contextlib.suppress(Exception):  # a dropped watch: list and watch again
                stream = (
                    w.stream(  # type: ignore[no-untyped-call]
                        self._apps.list_namespaced_deployment, self._namespace, timeout_seconds=30
                    )
                    if self._plain
                    else w.stream(  # type: ignore[no-untyped-call]
                        self._api.list_namespaced_custom_object,
                        GROUP,
                        VERSION,
                        self._namespace,
                        PLURAL,
                        timeout_seconds=30,
                    )
                )
                for ev in stream:
                    obj = ev["object"]
                    if self._plain:
                        name, ready = obj.metadata.name, deployment_available(obj)
                    else:
                        name, ready = obj["metadata"]["name"], service_ready(obj)
                    if ready and name not in self.ready_at:
                        self.ready_at[name] = time.monotonic()
                        self.ready_wall[name] = time.time()
                    if self._stop.is_set():
                        w.stop()  # type: ignore[no-untyped-call]

    def wait(self, names: list[str], timeout: float) -> list[str]:
        """Waits until all are Ready or `timeout`; returns those that are not."""
        deadline = time.monotonic() + timeout
        shown = time.monotonic()
        while time.monotonic() < deadline and not all(n in self.ready_at for n in names):
            time.sleep(0.2)
            if time.monotonic() - shown > 30:
                shown = time.monotonic()
                done = sum(n in self.ready_at for n in names)
                print(f"#   {done}/{len(names)} Ready, load {loadavg()}", flush=True)
        return [n for n in names if n not in self.ready_at]

    def stop(self) -> None:
        self._stop.set()


STEP_KINDS = {
    ("create", "replicasets"): "replicaset",
    ("create", "pods/binding"): "bound",
    ("patch", "pods/status"): "pod_status",
    ("update", "pods/status"): "pod_status",
    ("update", "deployments/status/available"): "deployment_available",
    ("patch", f"{PLURAL}/status/ready"): "service_ready",
}


def step_times(steps: list[Step], namespace: str) -> dict[tuple[str, str], list[float]]:
    """(kind of step, service or Deployment name) -> the times of such steps, in order."""
    out: dict[tuple[str, str], list[float]] = {}
    for st in steps:
        kind = STEP_KINDS.get((st.verb, st.resource))
        if st.namespace != namespace or kind is None or "-bench-" in st.name:
            continue
        if kind == "replicaset":
            base = st.name.rsplit("-", 1)[0]  # NAME-<template hash>
        elif kind in ("bound", "pod_status"):
            base = st.name.rsplit("-", 2)[0]  # NAME-<template hash>-<suffix>
        else:
            base = st.name
        out.setdefault((kind, base), []).append(st.t)
    return out


def ready_times(steps: list[Step], namespace: str) -> dict[str, float]:
    """When each service's status first said Ready=True, at the API server (the answer of
    the operator's status write, from the audit log)."""
    return {
        name: times[0]
        for (kind, name), times in step_times(steps, namespace).items()
        if kind == "service_ready"
    }


def rollout_stages(
    steps: list[Step],
    namespace: str,
    created: dict[str, float],
    first_write: dict[str, float],
    ready_wall: dict[str, float],
) -> dict[str, dict[str, float | int | None]]:
    """Where each service's time to Ready went, stage by stage, from the audit log: p50/p95
    seconds of each step's time after the step before it (services with both steps seen).

    create -> the operator writes the Deployment -> the Deployment controller creates the
    ReplicaSet -> the ReplicaSet controller creates the pod and the scheduler binds it -> kwok
    reports it Ready -> the Deployment controller reports the Deployment available -> the
    operator writes Ready=True into the service's status -> the benchmark's watch sees it.
    `ready_wall`: when a watch saw each service Ready (or each plain Deployment available)."""
    times = step_times(steps, namespace)
    order = [
        ("operator: create -> Deployment written", "created", "deployment"),
        ("controller: Deployment -> ReplicaSet", "deployment", "replicaset"),
        # a pod's create has no name in the audit log (generateName): one step to its binding
        ("controller + scheduler: ReplicaSet -> pod bound", "replicaset", "bound"),
        ("kwok: bound -> pod Ready", "bound", "pod_status"),
        ("controller: pod Ready -> Deployment available", "pod_status", "deployment_available"),
        ("operator: Deployment available -> status Ready", "deployment_available", "service_ready"),
        ("the benchmark's watch: status Ready -> seen", "service_ready", "seen"),
    ]
    out: dict[str, dict[str, float | int | None]] = {}
    for label, a, b in order:
        gaps = []
        for n in created:

            def first(kind: str, n: str = n) -> float | None:
                seen = times.get((kind, n))
                return seen[0] if seen else None

            ready = first("service_ready") or ready_wall.get(n, math.inf)

            def last_before_ready(kind: str, n: str = n, ready: float = ready) -> float | None:
                return max((t for t in times.get((kind, n), []) if t <= ready), default=None)

            at = {
                "created": created.get(n),
                "deployment": first_write.get(n),
                "replicaset": first("replicaset"),
                "bound": first("bound"),
                # the last pod status write before Ready: the one it waited for
                "pod_status": last_before_ready("pod_status"),
                "deployment_available": first("deployment_available"),
                "service_ready": first("service_ready"),
                "seen": ready_wall.get(n),
            }
            start, end = at[a], at[b]
            if start is not None and end is not None:
                gaps.append(end - start)
        out[label] = {
            "p50": round(pct(gaps, 50), 2) if gaps else None,
            "p95": round(pct(gaps, 95), 2) if gaps else None,
            "services": len(gaps),
        }
    return out


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def component_cpu(cluster: LocalCluster, operator_pid: int) -> dict[str, float]:
    """CPU seconds so far of each control-plane process and the operator: on a machine of two
    cores, who spends them decides how fast a fleet rolls out."""
    procs = json.loads((cluster.state_dir / "cluster.json").read_text())["procs"]
    out = {}
    for name, pid in [(p["name"], p["pid"]) for p in procs] + [("operator", operator_pid)]:
        with contextlib.suppress(OSError, ValueError, IndexError):
            out[name] = cpu_seconds(pid)
    return out


def bytes_read(pid: int) -> int:
    """rchar: bytes the process read through read(2) and friends (sockets included)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def scrape(port: int) -> dict[str, float]:
    """The operator's own metrics (those named vllm_operator_*), one key per series."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm_operator_") or "benchmark" in family.name:
            continue
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def metric_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Counters and histograms: the increase; gauges (workqueue depth): the value after."""
    out = {}
    for key, value in after.items():
        name = key.split("{", 1)[0]
        if name.endswith("_created"):  # prometheus_client's creation timestamps
            continue
        if name.endswith(("_total", "_count", "_sum")):
            delta = value - before.get(key, 0.0)
            if delta:
                out[key] = round(delta, 4)
        elif "workqueue" in name or "queue_depth" in name:
            out[key] = value
    return out


def by_verb(requests: list[Request]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in requests:
        counts[r.verb] = counts.get(r.verb, 0) + 1
    return dict(sorted(counts.items()))


def by_resource(requests: list[Request]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in requests:
        out.setdefault(r.resource, {})
        out[r.resource][r.verb] = out[r.resource].get(r.verb, 0) + 1
    return dict(sorted(out.items()))


def _generic(path: str, selector: str) -> tuple[str, str]:
    """A per-service request with its namespace and service name replaced by placeholders."""
    parts = path.split("/")
    if "namespaces" in parts and parts.index("namespaces") + 1 < len(parts):
        parts[parts.index("namespaces") + 1] = "{ns}"
    terms = []
    for term in selector.split(",") if selector else []:
        key = term.partition("=")[0]
        per_service = key in ("serving.vllm-operator.dev/service", "app.kubernetes.io/instance")
        terms.append(f"{key}={{service}}" if per_service else term)
    return "/".join(parts), ",".join(terms)


def watch_kinds(requests: list[Request]) -> list[dict[str, Any]]:
    """The operator's list and watch requests grouped by path and selectors (per-service
    ones as one group), with one concrete example of each."""
    groups: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for r in requests:
        if r.verb not in ("list", "watch"):
            continue
        url = urllib.parse.urlsplit(r.uri)
        q = urllib.parse.parse_qs(url.query)
        label, fields = q.get("labelSelector", [""])[0], q.get("fieldSelector", [""])[0]
        path, generic = _generic(url.path, label)
        group = groups.setdefault(
            (r.verb, path, generic, fields),
            {"requests": 0, "example": {"path": url.path, "labelSelector": label}},
        )
        group["requests"] += 1
    return [
        {"verb": v, "path": p, "labelSelector": ls, "fieldSelector": fs, **g}
        for (v, p, ls, fs), g in sorted(groups.items())
    ]


def scope_size(api: client.ApiClient, path: str, label: str, fields: str) -> dict[str, int]:
    """Objects (and JSON bytes) a list of `path` with these selectors returns: what the
    operator's list, or its watch's initial state, carries. Paged, as admin."""
    items = size = 0
    cont = ""
    while True:
        query = [("limit", "500")]
        query += [("labelSelector", label)] if label else []
        query += [("fieldSelector", fields)] if fields else []
        query += [("continue", cont)] if cont else []
        method, url, headers, body, _ = api.param_serialize(
            method="GET",
            resource_path=path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        resp = api.call_api(method, url, header_params=headers, body=body, _request_timeout=120)
        data = resp.read()  # type: ignore[no-untyped-call]
        size += len(data)
        page = json.loads(data)
        items += len(page.get("items", []))
        cont = page.get("metadata", {}).get("continue", "")
        if not cont:
            return {"objects": items, "bytes": size}


def create_unrelated(cluster: LocalCluster, configmaps: int, deployments: int) -> list[str]:
    """ConfigMaps of 1 KiB and 0-replica Deployments, none of them the operator's, spread over
    10 namespaces. Returns the namespaces."""
    spaces = [f"unrelated-{i}" for i in range(10)] if configmaps or deployments else []
    for i, ns in enumerate(spaces):
        cluster.kubectl("create", "namespace", ns)
        items: list[dict[str, Any]] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{j:05d}", "labels": {"app": f"app-{j % 50}"}},
                "data": {"config.yaml": f"# {ns}/{j}\n" + "x: " + "y" * 1000 + "\n"},
            }
            for j in range(i, configmaps, len(spaces))
        ]
        items += [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"app-{j:04d}", "labels": {"app": f"app-{j}"}},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": f"app-{j}"}},
                    "template": {
                        "metadata": {"labels": {"app": f"app-{j}"}},
                        "spec": {"containers": [{"name": "app", "image": "example/app:1"}]},
                    },
                },
            }
            for j in range(i, deployments, len(spaces))
        ]
        for start in range(0, len(items), 500):
            doc = {"apiVersion": "v1", "kind": "List", "items": items[start : start + 500]}
            cluster.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(doc), timeout=600)
    return spaces


def create_services(cluster: LocalCluster, namespace: str, names: list[str]) -> dict[str, float]:
    """Creates the services at once (8 requests in flight, as admin); returns when each
    create call returned (wall clock)."""
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(cluster.kubeconfig)
    )
    objects = client.CustomObjectsApi(api)

    def create(name: str) -> tuple[str, float]:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest(name))
        return name, time.time()

    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(create, names))


def operator_tree(rev: str) -> tuple[Path, str]:
    """The operator's code, CRDs and RBAC as of `rev`, extracted into a temporary folder."""
    sha = subprocess.run(
        ["git", "rev-parse", rev], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    root = Path(tempfile.mkdtemp(prefix="operator-scale-"))
    archive = subprocess.run(
        ["git", "archive", sha, "operator", "crds", "deploy"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return root, sha


def install_from(cluster: LocalCluster, root: Path) -> None:
    """CRDs, then RBAC, from `root` (a checkout or an extracted revision)."""
    for crd in ("kopf-peering.yaml", "vllmservices.yaml"):  # an older revision: both
        path = root / "crds" / crd
        if path.exists():
            cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    cluster.wait_crds_established("vllmservices.serving.vllm-operator.dev")
    rbac = root / "deploy" / "rbac.yaml"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(rbac))


@dataclass
class Bench:
    cluster: LocalCluster
    api: client.ApiClient
    op: OperatorProcess
    audit: AuditTail
    resync: float
    periods: int
    services_total: int = 0
    result_bytes: int = 0  # --result-bytes: each run's published result.json (0: none)
    profile: Path | None = None  # --profile: the sampler's output (benchmarks/profiling)

    @property
    def pid(self) -> int:
        assert self.op.pid is not None
        return self.op.pid

    def reconciles(self) -> float | None:
        """The operator's own count of reconciles so far (None when it does not export it)."""
        counts = [
            v for k, v in scrape(self.op.metrics_port).items() if k.startswith(RECONCILES_METRIC)
        ]
        return sum(counts) if counts else None

    def settle(self, quiet: float, limit: float) -> dict[str, Any]:
        """Waits until the operator wrote nothing for `quiet` s and, when it counts its
        reconciles, runs them no faster than its resync does (1.5 x services / interval over
        `quiet` s): the backlog of child events is drained. At most `limit` s."""
        start = time.time()
        deadline = start + limit
        steady = 1.5 * self.services_total / self.resync
        rate = None
        while True:
            last = self.audit.last_write(exclude=COORDINATION)
            now = time.time()
            if now > deadline:
                break
            if last is not None and now - last < quiet:
                time.sleep(2)
                continue
            r0 = self.reconciles()
            if r0 is None:
                break
            time.sleep(quiet)
            r1 = self.reconciles() or r0
            rate = (r1 - r0) / quiet
            if rate <= steady:
                break
        return {
            "last_write": last,
            "settle_seconds": round(time.time() - start, 1),
            "settled": time.time() <= deadline,
            "reconciles_per_second_at_end": round(rate, 2) if rate is not None else None,
            "steady_reconciles_per_second": round(steady, 2),
        }

    def noop_window(self) -> dict[str, Any]:
        """One or more resync intervals with nothing changing, measured from outside."""
        window = self.resync * self.periods
        switch = self.profile.with_name(self.profile.name + ".on") if self.profile else None
        if switch is not None:
            switch.touch()
        m0, t0 = scrape(self.op.metrics_port), time.time()
        cpu0, io0 = cpu_seconds(self.pid), bytes_read(self.pid)
        time.sleep(window)
        cpu1, io1, t1 = cpu_seconds(self.pid), bytes_read(self.pid), time.time()
        profile = None
        if switch is not None and self.profile is not None:
            switch.unlink()
            profile = self.profiled(f"{self.services_total}")
        m1 = scrape(self.op.metrics_port)
        time.sleep(2)  # the audit log's last lines
        reqs = self.audit.between(t0, t1)
        verbs = by_verb(reqs)
        writes = sum(1 for r in reqs if r.verb in WRITE_VERBS and r.resource not in COORDINATION)
        coordination = sum(1 for r in reqs if r.verb in WRITE_VERBS and r.resource in COORDINATION)
        # the Lease's get before each renewal is the replicas' coordination, not per service
        reads = sum(1 for r in reqs if r.verb in READ_VERBS and r.resource not in COORDINATION)
        n, p = max(self.services_total, 1), self.periods
        metrics = metric_delta(m0, m1)
        reconciles = sum(v for k, v in metrics.items() if k.startswith(RECONCILES_METRIC))
        api_by_verb = {
            k.split("verb=", 1)[1].split(",")[0].rstrip("}"): v
            for k, v in metrics.items()
            if k.startswith("vllm_operator_api_requests_total") and "verb=" in k
        }
        return {
            "window_seconds": round(t1 - t0, 1),
            "resyncs": p,
            "operator_cpu_seconds_per_resync": round((cpu1 - cpu0) / p, 3),
            "operator_cpu_ms_per_service_per_resync": round((cpu1 - cpu0) / p / n * 1000, 3),
            "operator_mib_read_per_resync": round((io1 - io0) / p / 2**20, 2),
            "api_writes_per_resync": round(writes / p, 2),
            "coordination_writes_per_resync": round(coordination / p, 2),
            "api_reads_per_resync": round(reads / p, 2),
            "api_reads_per_service_per_resync": round(reads / p / n, 3),
            "audit_by_verb": verbs,
            "audit_by_resource": by_resource(reqs),
            "operator_metrics": metrics,
            "operator_api_requests_by_verb": api_by_verb or None,
            "reconciles_per_service_per_resync": round(reconciles / p / n, 3)
            if reconciles
            else None,
            "loadavg": loadavg(),
            "profile": profile,
        }

    def profiled(self, label: str) -> dict[str, Any] | None:
        """The sampler's figures of the window just measured (kept whole beside --out)."""
        assert self.profile is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # (its last write, once the switch is gone)
            with contextlib.suppress(OSError, ValueError):
                body = json.loads(self.profile.read_text())
                if time.time() - body["started"] - body["seconds"] < 5:
                    break
            time.sleep(0.5)
        else:
            return None
        whole = self.profile.with_name(f"{self.profile.stem}-{label}.json")
        whole.write_text(json.dumps(body, indent=1))
        return {
            "file": str(whole),
            "seconds": body["seconds"],
            "samples": body["samples"],
            "cpu_seconds_by_thread_group": body["cpu_seconds_by_thread_group"],
            "self_top": body["self"][:15],
        }

    def plain_rollout(self, size: int, timeout: float) -> dict[str, Any]:
        """The control: `size` Deployments of the operator's own pod template (taken from a
        service of the single-service rounds), each with a ClusterIP Service, created at once
        without any VLLMService. What the cluster alone needs to roll them out is the floor
        under the services' Ready time; the operator's share (its reconciles, its status
        writes, the benchmark Jobs it starts as services become Ready) is the rest."""
        ns = f"fleet-plain-{size}"
        self.cluster.kubectl("create", "namespace", ns)
        live = json.loads(self.cluster.kubectl("get", "deploy", "-n", "bench-one", "-o", "json"))
        pod_spec = live["items"][0]["spec"]["template"]["spec"]
        apps, core = client.AppsV1Api(self.api), client.CoreV1Api(self.api)
        watcher = ReadyWatcher(self.api, ns, plain=True)
        names = [f"plain-{i:04d}" for i in range(size)]

        def create(name: str) -> tuple[str, float]:
            labels = {"bench-plain": name}
            body: Any = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": pod_spec},
                },
            }
            apps.create_namespaced_deployment(ns, body)
            # and its Service, as a VLLMService has one (a ClusterIP to allocate)
            service: Any = {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name},
                "spec": {"selector": labels, "ports": [{"name": "http", "port": 8000}]},
            }
            core.create_namespaced_service(ns, service)
            return name, time.time()

        cpu0 = component_cpu(self.cluster, self.pid)
        wall0, t0 = time.time(), time.monotonic()
        with ThreadPoolExecutor(8) as pool:  # as create_services does
            created = dict(pool.map(create, names))
        missing = watcher.wait(names, timeout)
        watcher.stop()
        cpu1, wall = component_cpu(self.cluster, self.pid), time.monotonic() - t0
        time.sleep(1)  # the audit log's last lines
        self.audit.poll()
        # available: when the API server answered the status update that said so
        at = dict(watcher.ready_wall)
        for (kind, name), times in step_times(self.audit.steps, ns).items():
            if kind == "deployment_available":
                at[name] = times[0]
        ready = [at[n] - wall0 for n in names if n in at]
        stages = rollout_stages(self.audit.steps, ns, created, created, watcher.ready_wall)
        result = {
            "deployments": size,
            "available_seconds": {
                "p50": round(pct(ready, 50), 2) if ready else None,
                "p95": round(pct(ready, 95), 2) if ready else None,
                "max": round(max(ready), 2) if ready else None,
                "not_available_after_timeout": len(missing),
            },
            "rollout_stages_seconds": {
                k: v for k, v in stages.items() if k.startswith(("controller", "kwok"))
            },
            "cpu_seconds_until_available": {
                "wall": round(wall, 1),
                **{k: round(cpu1[k] - cpu0[k], 1) for k in cpu1 if k in cpu0},
            },
        }
        print(f"# plain Deployments {size}: {json.dumps(result)}", flush=True)
        return result

    def publish(self, ns: str, names: list[str], timeout: float) -> dict[str, Any]:
        """What each service's benchmark Job would do, were its pod real (kwok's pods run
        nothing): patch the run's result ConfigMap with state Complete and a result.json of
        `result_bytes`, as the Job's own account may. Waits for each run's ConfigMap first (the
        operator starts a run as its service turns Ready)."""
        core = client.CoreV1Api(self.api)
        selector = "app.kubernetes.io/component=benchmark,app.kubernetes.io/name=vllm-bench"
        deadline, runs = time.monotonic() + timeout, {}
        while time.monotonic() < deadline:
            runs = {
                cm.metadata.labels.get("serving.vllm-operator.dev/service", ""): cm.metadata.name
                for cm in core.list_namespaced_config_map(ns, label_selector=selector).items
            }
            if len(runs) >= len(names):
                break
            time.sleep(2)
        body = json.dumps(realistic_result(self.result_bytes))
        t0 = time.monotonic()

        def patch(run: str) -> None:
            core.patch_namespaced_config_map(
                run, ns, {"data": {"state": "Complete", "result.json": body}}
            )

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(patch, runs.values()))
        out = {
            "runs": len(runs),
            "bytes_each": len(body),
            "seconds": round(time.monotonic() - t0, 1),
        }
        print(f"# published results: {out}", flush=True)
        return out

    def batch(self, size: int, timeout: float) -> dict[str, Any]:
        """`size` services applied at once in a namespace of their own, then a no-op window."""
        ns = f"fleet-{size}"
        self.cluster.kubectl("create", "namespace", ns)
        watcher = ReadyWatcher(self.api, ns)
        names = [f"svc-{i:04d}" for i in range(size)]
        load0 = loadavg()
        cpu0 = component_cpu(self.cluster, self.pid)
        wall0, t0 = time.time(), time.monotonic()
        created = create_services(self.cluster, ns, names)
        applied = time.monotonic() - t0
        self.services_total += size
        missing = watcher.wait(names, timeout)
        watcher.stop()
        cpu1, rollout_wall = component_cpu(self.cluster, self.pid), time.monotonic() - t0
        seen = [watcher.ready_at[n] - t0 for n in names if n in watcher.ready_at]
        # where the time goes: the operator's first write of each Deployment (from the
        # service's create), then the cluster's rollout until the operator reports Ready
        first_write: dict[str, float] = {}
        during = self.audit.between(wall0, time.time() + 1)
        # Ready: when the API server answered the status write that made it so (the watch's
        # moment where the audit log lacks it)
        at = {**watcher.ready_wall, **ready_times(self.audit.steps, ns)}
        ready = [at[n] - wall0 for n in names if n in at]
        own = [at[n] - created[n] for n in names if n in at]
        for r in during:
            if r.resource == "apps/deployments" and r.verb in ("create", "patch", "update"):
                name = urllib.parse.urlsplit(r.uri).path.rsplit("/", 1)[-1]
                if name in created and name not in first_write:
                    first_write[name] = r.t
        to_write = [first_write[n] - created[n] for n in names if n in first_write]
        write_to_ready = [at[n] - first_write[n] for n in names if n in first_write and n in at]
        stages = rollout_stages(self.audit.steps, ns, created, first_write, watcher.ready_wall)
        published = self.publish(ns, names, timeout) if self.result_bytes else None
        settle = self.settle(quiet=20.0, limit=300)
        last = settle.pop("last_write")
        result: dict[str, Any] = {
            "batch": size,
            "services_total": self.services_total,
            "loadavg_at_apply": load0,
            "apply_call_seconds": round(applied, 2),
            "ready_seconds": {
                "p50": round(pct(ready, 50), 2) if ready else None,
                "p95": round(pct(ready, 95), 2) if ready else None,
                "max": round(max(ready), 2) if ready else None,
                "not_ready_after_timeout": len(missing),
                "timeout_seconds": timeout,
            },
            "ready_seen_by_watch_seconds": {
                "p50": round(pct(seen, 50), 2) if seen else None,
                "p95": round(pct(seen, 95), 2) if seen else None,
            },
            # from each service's own create call returning, not from the batch's start
            "ready_after_own_create_seconds": {
                "p50": round(pct(own, 50), 2) if own else None,
                "p95": round(pct(own, 95), 2) if own else None,
                "max": round(max(own), 2) if own else None,
            },
            "create_to_deployment_write_seconds": {
                "p50": round(pct(to_write, 50), 2) if to_write else None,
                "p95": round(pct(to_write, 95), 2) if to_write else None,
            },
            "deployment_write_to_ready_seconds": {
                "p50": round(pct(write_to_ready, 50), 2) if write_to_ready else None,
                "p95": round(pct(write_to_ready, 95), 2) if write_to_ready else None,
            },
            "rollout_stages_seconds": stages,
            # the operator's requests from the first create until the last Ready, per service
            "operator_requests_per_service_until_ready": {
                res: {verb: round(n / size, 2) for verb, n in verbs.items()}
                for res, verbs in by_resource(during).items()
            },
            "cpu_seconds_until_ready": {
                "wall": round(rollout_wall, 1),
                **{k: round(cpu1[k] - cpu0[k], 1) for k in cpu1 if k in cpu0},
            },
            "converged_seconds": round(last - wall0, 1) if last else None,
            "settle": settle,
            "operator_rss_mib_converged": rss_mib(self.pid),
            "published_results": published,
        }
        print(f"# batch {size}: {json.dumps(result)}", flush=True)
        result["noop_resync"] = self.noop_window()
        result["operator_rss_mib_after_noop"] = rss_mib(self.pid)
        return result


def realistic_result(size: int) -> dict[str, Any]:
    """A result.json of the runner's shape (vllm_bench/schema/result.schema.json: status,
    headline, liveLoad, scenarios with their raw samples) of about `size` bytes: a lab
    result with its samples is 366 KB; the samples are the bulk."""
    doc: dict[str, Any] = {
        "status": "ok",
        "finishedAt": "2026-12-01T12:00:00Z",
        "headline": {
            "kvCacheTokens": 183424,
            "maxConcurrencyAtMaxModelLen": 44.8,
            "outputTokensPerSecond": 1873.5,
            "batchingSpeedup": 6.1,
            "prefixTtftSpeedup": 2.4,
            "prefixHitRate": 0.93,
            "ttftP50Seconds": 0.081,
            "ttftP95Seconds": 0.204,
        },
        "liveLoad": {"foreignRequests": 0, "peakForeignInFlight": 0, "quiet": True},
        "scenarios": [],
    }
    sample = {"ttftSeconds": 0.0812, "latencySeconds": 1.9431, "outputTokens": 128, "ok": True}
    per = len(json.dumps(sample)) + 2
    n = max(size - len(json.dumps(doc)), 0) // per
    doc["scenarios"] = [{"name": "throughput", "samples": [dict(sample) for _ in range(n)]}]
    return doc


def table(results: dict[str, Any]) -> str:
    head = (
        f"{'services':>8} {'batch':>6} {'p50 s':>7} {'p95 s':>7} {'max s':>7} {'conv s':>7} "
        f"{'RSS MiB':>8} {'CPU s/rs':>8} {'wr/rs':>6} {'rd/svc/rs':>9} {'MiB rd/rs':>9} "
        f"{'load1':>6} settled"
    )
    lines = [head]
    for s in results.get("ladder", []):
        r, n = s["ready_seconds"], s["noop_resync"]
        lines.append(
            f"{s['services_total']:>8} {s['batch']:>6} {r['p50']!s:>7} {r['p95']!s:>7} "
            f"{r['max']!s:>7} {s['converged_seconds']!s:>7} {s['operator_rss_mib_after_noop']:>8} "
            f"{n['operator_cpu_seconds_per_resync']:>8} {n['api_writes_per_resync']:>6} "
            f"{n['api_reads_per_service_per_resync']:>9} {n['operator_mib_read_per_resync']:>9} "
            f"{n['loadavg'][0]:>6} {s['settle']['settled']}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--ladder", default="10,100,1000", help="batch sizes, applied in turn")
    parser.add_argument("--rounds", type=int, default=3, help="single-service rounds")
    parser.add_argument("--unrelated-configmaps", type=int, default=10000)
    parser.add_argument("--unrelated-deployments", type=int, default=1000)
    parser.add_argument("--resync", type=float, default=60.0, help="resync interval (s)")
    parser.add_argument("--periods", type=int, default=1, help="resync intervals measured")
    parser.add_argument("--ready-timeout", type=float, default=1500.0)
    parser.add_argument("--operator-source", help="git revision of the operator (default: tree)")
    parser.add_argument(
        "--controller-qps", type=int, default=0, help="kube-controller-manager's --kube-api-qps"
    )
    parser.add_argument(
        "--controller-workers",
        type=int,
        default=0,
        help="kube-controller-manager's --concurrent-{deployment,replicaset,job}-syncs",
    )
    parser.add_argument("--workers", type=int, default=0, help="the operator's (default: its own)")
    parser.add_argument(
        "--no-benchmark",
        action="store_true",
        help="services with spec.benchmark.enabled: false (no benchmark Job as each is Ready)",
    )
    parser.add_argument(
        "--baseline",
        type=int,
        default=0,
        help="first roll out this many plain Deployments of the same pods, without the "
        "operator (the cluster's own time: the floor under the services' Ready time)",
    )
    parser.add_argument(
        "--result-bytes",
        type=int,
        default=0,
        help="as each batch is Ready, publish a result.json of this size into every run's "
        "result ConfigMap (what its Job would: kwok's pods run nothing); a lab result is 366000",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the operator's CPU by thread and function during each no-op resync "
        "(benchmarks/profiling/sitecustomize.py); the figures go here, one file per window",
    )
    parser.add_argument("--label", default="", help="a name for this run in the JSON")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    ladder = [int(x) for x in args.ladder.split(",") if x]
    BENCHMARK["enabled"] = not args.no_benchmark

    results: dict[str, Any] = {
        "label": args.label,
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "loadavg_at_start": loadavg()},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }

    def save() -> None:
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2) + "\n")

    source = REPO_ROOT
    # what the downward API gives the operator's pod: the namespace of its leader-election Lease
    extra_env = {"POD_NAMESPACE": OPERATOR_NAMESPACE}
    if args.workers:
        extra_env["VLLM_OPERATOR_WORKERS"] = str(args.workers)
    if args.operator_source:
        source, sha = operator_tree(args.operator_source)
        extra_env["PYTHONPATH"] = str(source / "operator")
        results["operator"] = {"revision": sha}
    else:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        results["operator"] = {"revision": f"{sha} + working tree"}
    if args.profile:
        args.profile = args.profile.resolve()
        args.profile.parent.mkdir(parents=True, exist_ok=True)
        profiling = str(REPO_ROOT / "benchmarks" / "profiling")
        extra_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (profiling, extra_env.get("PYTHONPATH")) if p
        )
        extra_env["VLLM_BENCH_PROFILE"] = str(args.profile)

    total = sum(ladder) + args.rounds + args.baseline
    gpus = 64
    # a vLLM pod (1 GPU) and a benchmark pod per service; 110 pods per node
    count = max(math.ceil(total / gpus), math.ceil(2 * total / 100)) + 1
    nodes = tuple(
        GpuNode(f"gpu-node-{i}", gpus=gpus, cpu="1000", memory="8000Gi") for i in range(count)
    )
    cluster = bench_cluster(nodes, args.controller_qps, args.controller_workers)
    cluster.reset()
    results["nodes"] = {"count": count, "gpus_each": gpus}
    try:
        with cluster.session():
            install_from(cluster, source)
            api = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=str(cluster.kubeconfig)
            )
            t = time.monotonic()
            spaces = create_unrelated(
                cluster, args.unrelated_configmaps, args.unrelated_deployments
            )
            results["unrelated"] = {
                "configmaps": args.unrelated_configmaps,
                "deployments": args.unrelated_deployments,
                "namespaces": len(spaces),
                "create_seconds": round(time.monotonic() - t, 1),
            }
            print(f"# unrelated objects: {results['unrelated']}", flush=True)
            audit = AuditTail(cluster.audit_log)
            op = OperatorProcess(
                cluster,
                cluster.log_dir / "operator.log",
                resync_seconds=args.resync,
                extra_env=extra_env,
            )
            t = time.monotonic()
            op.start(timeout=300)
            results["operator_start_seconds"] = round(time.monotonic() - t, 1)
            bench = Bench(
                cluster,
                api,
                op,
                audit,
                args.resync,
                args.periods,
                result_bytes=args.result_bytes,
                profile=args.profile,
            )
            try:
                time.sleep(10)
                results["operator_rss_mib_idle"] = rss_mib(bench.pid)
                results["operator_cpu_seconds_at_idle"] = round(cpu_seconds(bench.pid), 2)

                # --- 1 service, several rounds ---------------------------------------
                cluster.kubectl("create", "namespace", "bench-one")
                watcher = ReadyWatcher(api, "bench-one")
                singles = []
                for i in range(args.rounds):
                    name = f"one-{i}"
                    t0 = time.monotonic()
                    cluster.kubectl(
                        "create", "-n", "bench-one", "-f", "-", stdin=json.dumps(manifest(name))
                    )
                    watcher.wait([name], 300)
                    singles.append(watcher.ready_at.get(name, math.inf) - t0)
                watcher.stop()
                bench.services_total += args.rounds
                if singles:
                    results["one_service_seconds"] = {
                        "p50": round(statistics.median(singles), 2),
                        "max": round(max(singles), 2),
                        "samples": [round(s, 2) for s in singles],
                    }
                print(f"# one service: {results.get('one_service_seconds')}", flush=True)
                save()

                # --- the control: the same pods without the operator ----------------
                if args.baseline:
                    results["plain_deployments"] = bench.plain_rollout(
                        args.baseline, args.ready_timeout
                    )
                    save()

                # --- the ladder ------------------------------------------------------
                results["ladder"] = []
                for size in ladder:
                    results["ladder"].append(bench.batch(size, args.ready_timeout))
                    save()
                    print(table(results), flush=True)

                # --- what the operator lists and watches ---------------------------------
                audit.poll()
                kinds = watch_kinds(audit.requests)
                for k in kinds:  # objects in scope of one request of the group (its example)
                    ex = k["example"]
                    k["scope"] = scope_size(
                        api, ex["path"], ex["labelSelector"], k["fieldSelector"]
                    )
                results["list_watch_requests"] = kinds
                results["all_requests_by_resource"] = by_resource(audit.requests)
                results["operator_rss_mib_end"] = rss_mib(bench.pid)
                results["operator_cpu_seconds_total"] = round(cpu_seconds(bench.pid), 1)
            finally:
                op.stop()
    finally:
        save()
        cluster.reset()
        if source != REPO_ROOT:
            shutil.rmtree(source, ignore_errors=True)
    results["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    save()
    print(json.dumps({k: v for k, v in results.items() if k != "ladder"}, indent=2))
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
