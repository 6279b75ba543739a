"""The benchmark of a rollout: its result ConfigMap, the Job that fills it, the Job's
ServiceAccount, Role and RoleBinding (it may only read and patch that one ConfigMap), and the
run's record: a second ConfigMap, which the Job cannot write, holding what the operator
decides (the revision's spec, what a rollback restores, and the verdict of the gates)."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from vllm_operator import GROUP
from vllm_operator.api.records import LiveWorkload, Target
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.render.deployment import revision_body
from vllm_operator.render.meta import MANAGED_BY, SERVICE_LABEL, owner_reference
from vllm_operator.render.service import endpoint

COMPONENT = "benchmark"
RECORD_COMPONENT = "benchmark-record"
# on the benchmark's objects: the revision they measure (bench_labels)
REVISION_LABEL = f"{GROUP}/revision"
# on the serving and canary Deployments: the revision of their pod template (reconcile
# .with_revision, render/canary.py). The same key as the label, as live objects carry it
REVISION_ANNOTATION = f"{GROUP}/revision"
RESULT_KEY = "result.json"
SPEC_KEY = "spec.json"
# beside it: a hash of that text (spec_hash), so that a spec edited in the record after the
# run is told apart from one the operator renders differently now (policy.restorable)
SPEC_HASH_KEY = "specHash"
STATE_KEY = "state"
MESSAGE_KEY = "message"
VERDICT_KEY = "verdict"
VERDICT_FAILURES_KEY = "verdictFailures"
# beside a Failed verdict: the run that confirms it (policy.decide rolls back only when that
# one fails too)
CONFIRMATION_KEY = "confirmation"
# the pod the run measures (decide/target_pod.py), in the run's record and on the Job
TARGET_POD_KEY = "targetPod"
TARGET_UID_KEY = "targetPodUID"
TARGET_IP_KEY = "targetPodIP"
TARGET_PORT_KEY = "targetPort"
TARGET_ANNOTATION = f"{GROUP}/target-pod"
# on the Deployment: the revision rolled out before the one it runs now (observe/state.py); in a
# run's record: that revision as the run started (what its failure rolls back to)
PREVIOUS_REVISION_ANNOTATION = f"{GROUP}/previous-revision"
SERVED_BEFORE_KEY = "servedBefore"
LIVE_WORKLOAD_KEY = "liveWorkload"  # the live traffic shape the run sends (LiveWorkload.dump)
RESULTS_DIR = "/results"
# leave the runner time to write its partial results before the Job's deadline kills it
RUNNER_DEADLINE_MARGIN_SECONDS = 30


def revision(pod_template: dict[str, Any]) -> str:
    """A stable id of what runs: a hash of the rendered pod template (a measured startup
    budget left out: render/deployment.revision_body)."""
    body = json.dumps(revision_body(pod_template), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(body).hexdigest()[:10]


def spec_hash(spec_json: str) -> str:
    """What the user asked for, as recorded with a run: a hash of the spec's JSON text."""
    return hashlib.sha256(spec_json.encode()).hexdigest()[:16]


def run_name(svc: Service, rev: str) -> str:
    """The Job and its result ConfigMap share this name: one run per revision, and one more
    per value of the rerun annotation (a new name: a finished Job lingering until its TTL, or
    its immutable template, never blocks the re-run). At most 62 characters."""
    name = f"{svc.name}-bench-{rev[:8]}"
    if svc.rerun:
        name += "-" + hashlib.sha256(svc.rerun.encode()).hexdigest()[:4]
    return name


def record_name(run: str) -> str:
    """The record of run `run`: a name the Job's Role does not grant."""
    return f"{run}-record"


def account_name(svc: Service) -> str:
    return f"{svc.name}-bench"


def bench_labels(
    svc: Service, rev: str | None = None, component: str = COMPONENT
) -> dict[str, str]:
    # not the server's selector labels: the Service must never route to a benchmark pod
    out = {
        "app.kubernetes.io/name": "vllm-bench",
        "app.kubernetes.io/instance": svc.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        SERVICE_LABEL: svc.name,
    }
    if rev:
        out[REVISION_LABEL] = rev
    return out


def _meta(
    svc: Service, name: str, rev: str | None = None, component: str = COMPONENT
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": svc.namespace,
        "labels": bench_labels(svc, rev, component),
        "ownerReferences": [owner_reference(svc)],
    }


def render_result_configmap(svc: Service, rev: str) -> dict[str, Any]:
    """Created before the Job: where the Job writes the result; it outlives the Job (history).
    Everything in it is the Job's word: the operator reads its result and nothing else."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(svc, run_name(svc, rev), rev),
        "data": {STATE_KEY: "Running"},
    }


def render_run_record(
    svc: Service,
    rev: str,
    target: Target | None = None,
    served_before: str = "",
    workload: LiveWorkload | None = None,
) -> dict[str, Any]:
    """Created with the run, before the Job: the spec of the revision (what a rollback
    restores, re-rendered by the operator of that moment) and its hash, the pod the run
    measures, and the revision that served before this one was rolled out
    (`served_before`). The operator later merges the verdict into it, and the state of a run
    it ended (superseded, no result, its pod gone)."""
    spec_json = svc.spec.model_dump_json(by_alias=True, exclude_none=True)
    data = {SPEC_KEY: spec_json, SPEC_HASH_KEY: spec_hash(spec_json)}
    if target is not None:
        data |= {
            TARGET_POD_KEY: target.pod,
            TARGET_UID_KEY: target.uid,
            TARGET_IP_KEY: target.ip,
            TARGET_PORT_KEY: str(target.port),
        }
    if served_before:
        data[SERVED_BEFORE_KEY] = served_before
    if workload is not None:
        data[LIVE_WORKLOAD_KEY] = workload.dump()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(svc, record_name(run_name(svc, rev)), rev, RECORD_COMPONENT),
        "data": data,
    }


def recorded_target(record: dict[str, str]) -> Target | None:
    """The measured pod as the run's record holds it (None: a run recorded before runs
    targeted one pod, or a record without it)."""
    pod, ip = record.get(TARGET_POD_KEY), record.get(TARGET_IP_KEY)
    if not pod or not ip:
        return None
    try:
        port = int(record.get(TARGET_PORT_KEY, ""))
    except ValueError:
        return None
    return Target(pod=pod, uid=record.get(TARGET_UID_KEY, ""), ip=ip, port=port)


def render_account(svc: Service, rev: str) -> list[dict[str, Any]]:
    name = account_name(svc)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(svc, name)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(svc, name),
            # exactly one object: the result ConfigMap of the revision being measured
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [run_name(svc, rev)],
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(svc, name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": svc.namespace}],
        },
    ]


def runner_args(
    svc: Service,
    settings: OperatorSettings,
    target: Target | None = None,
    workload: LiveWorkload | None = None,
) -> list[str]:
    """The user's args first, the operator's flags last: argparse keeps the last value of a
    flag, so even a runner flag the CRD does not know yet cannot redirect the load (and the
    service's API key, sent as the bearer token) away from the service. `target`: the one pod
    measured (decide/target_pod.py); without one, the Service (every replica, load-balanced).
    `workload`: the live traffic shape, for the lengths the objective leaves unset."""
    b, o = svc.spec.benchmark, svc.spec.objective
    # the objective's workload shape (the CRD refuses the same flags in benchmark.args), else
    # the live traffic's
    live_in, live_out = (
        (workload.input_tokens, workload.output_tokens) if workload is not None else (None, None)
    )
    shape = (
        ()
        if o is None
        else (
            ("--input-tokens", o.input_tokens if o.input_tokens is not None else live_in),
            ("--output-tokens", o.output_tokens if o.output_tokens is not None else live_out),
        )
    )
    lengths = [x for flag, value in shape if value is not None for x in (flag, str(value))]
    # the objective itself: the runner's ladder then measures the concurrencies around where
    # latency crosses it (scenarios/batching.refine), what decide/capacity reads the capacity off
    judged = (
        []
        if o is None
        else [
            x
            for flag, value in (
                ("--objective-ttft", o.ttft_seconds),
                ("--objective-tpot", o.tpot_seconds),
                ("--objective-percentile", o.percentile),
            )
            if value is not None
            for x in (flag, str(value))
        ]
    )
    return [
        "run",
        *b.args,
        *lengths,
        "--url",
        target.url if target is not None else endpoint(svc, settings).removesuffix("/v1"),
        "--model",
        svc.spec.served_model_name,
        "--scenarios",
        ",".join(b.scenarios),
        "--out",
        RESULTS_DIR,
        "--max-duration-seconds",
        str(max(b.timeout_seconds - RUNNER_DEADLINE_MARGIN_SECONDS, 5)),
        *judged,
    ]


def placement(svc: Service) -> dict[str, Any]:
    """Where the Job's pod may run and pull from: the server's nodeSelector, tolerations (with
    the GPU taint's, as the server's pods get it) and imagePullSecrets. Without them, on a
    cluster of tainted GPU nodes only, behind a node selector, or with the runner image in a
    private registry, the Job never starts and the run times out. Not the affinity (it may
    name the server's own pods), the priority or the runtime class: the Job needs no GPU."""
    spec = svc.spec
    out: dict[str, Any] = {}
    if spec.node_selector:
        out["nodeSelector"] = dict(spec.node_selector)
    tolerations = [copy.deepcopy(t) for t in spec.tolerations]
    gpu = spec.resources.gpu_resource_name
    if not spec.resources.on_cpu and not any(t.get("key") == gpu for t in tolerations):
        tolerations.append({"key": gpu, "operator": "Exists", "effect": "NoSchedule"})
    if tolerations:
        out["tolerations"] = tolerations
    if spec.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    return out


def render_job(
    svc: Service,
    settings: OperatorSettings,
    rev: str,
    target: Target | None = None,
    workload: LiveWorkload | None = None,
) -> dict[str, Any]:
    """`target`: the pod to measure (its IP and port; recorded on the Job as an annotation
    too, for `kubectl describe`); None: the Service."""
    b = svc.spec.benchmark
    name = run_name(svc, rev)
    env: list[dict[str, Any]] = [
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "MPLCONFIGDIR", "value": "/tmp"},
    ]
    if svc.spec.api_key is not None:
        env.append(
            {
                "name": "VLLM_BENCH_API_KEY",  # the runner sends it as a bearer token
                "valueFrom": {
                    "secretKeyRef": {"name": svc.spec.api_key.name, "key": svc.spec.api_key.key}
                },
            }
        )
    container = {
        "name": "bench",
        "image": b.image or settings.benchmark_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "vllm_benchjob"],
        # a runner that refuses its arguments leaves argparse's message as the termination
        # message: the status quotes it with the Job's failure (observe.job_state)
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "args": [
            "--configmap",
            name,
            "--revision",
            rev,
            "--",
            *runner_args(svc, settings, target, workload),
        ],
        "env": env,
        # one asyncio process: it never uses more than a core, and mostly waits on the server;
        # half a core leaves room beside a CPU-served model on a small node
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "results", "mountPath": RESULTS_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    meta = _meta(svc, name, rev)
    if target is not None:
        meta["annotations"] = {TARGET_ANNOTATION: f"{target.pod} {target.url}"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            # a retry would measure a warmed-up server and not compare; a failure is reported
            "backoffLimit": 0,
            "activeDeadlineSeconds": b.timeout_seconds,
            "ttlSecondsAfterFinished": 3600,  # the result lives on in the ConfigMap
            "template": {
                "metadata": {"labels": bench_labels(svc, rev)},
                "spec": {
                    "serviceAccountName": account_name(svc),
                    "restartPolicy": "Never",
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    **placement(svc),
                    "containers": [container],
                    "volumes": [
                        {"name": "results", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }
