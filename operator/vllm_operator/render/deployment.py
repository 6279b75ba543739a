"""The Deployment running vLLM's OpenAI-compatible server, on GPUs or (resources.gpus: 0) on
vLLM's CPU backend."""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from typing import Any

from vllm_operator import GROUP
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import MODEL_PVC_MOUNT, Service, VLLMServiceSpec
from vllm_operator.render.meta import labels, metadata, selector_labels
from vllm_operator.render.service import PORT_NAME

CONTAINER = "vllm"
# On the Deployment while autoscaling is on, and while a count the autoscaler chose is held
# after it was switched off: the spec.replicas that count is held against (decide_replicas)
REPLICAS_HELD_ANNOTATION = f"{GROUP}/replicas-held-for"
# when a hold began (autoscaling switched off): it ends replicas_hold_seconds later
REPLICAS_HELD_SINCE_ANNOTATION = f"{GROUP}/replicas-held-since"
# On the Deployment: the revision whose rollout found no room for a surge pod (one replica,
# rollout.oneReplicaSurge): it is replaced in place, as maxSurge/maxUnavailable say
SURGE_REFUSED_ANNOTATION = f"{GROUP}/no-room-for-surge"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# Pod Security "restricted" (settings.vllm_pod_security): any non-root uid works, since
# nothing vLLM writes needs the image's user; 65532 is images/vllm-cpu's own user. vLLM,
# Triton, FlashInfer and torch.compile write their caches under $HOME, and the default HF
# cache (modelCache.mountPath) is /root/.cache/huggingface, but /root is root's 0700 home in
# the vLLM images: an emptyDir over /root (world-writable) is HOME instead, so both work for
# any uid. fsGroup makes a PVC model cache written by an earlier root pod writable
# (OnRootMismatch: one chown when its group differs, not one walk of a large cache per start).
NON_ROOT_ID = 65532
HOME_DIR = "/root"
# What a uid without a passwd entry needs besides HOME (issue 19 (1)): the upstream vLLM images
# have none for 65532, and getpass.getuser() then raises KeyError('getpwuid(): uid not found')
# unless LOGNAME or USER is set; torch before 2.13 asks it for the inductor cache's default
# directory (/tmp/torchinductor_<user>) when vLLM imports torch._dynamo.convert_frame at
# start-up. The inductor and Triton caches go under the writable home volume (not under $HOME,
# which a user may point elsewhere). Each one a spec.env entry of the same name replaces.
POD_USER = "vllm"
HOME_ENV: tuple[tuple[str, str], ...] = (
    ("HOME", HOME_DIR),
    ("USER", POD_USER),
    ("LOGNAME", POD_USER),
    ("TORCHINDUCTOR_CACHE_DIR", f"{HOME_DIR}/.cache/torchinductor"),
    ("TRITON_CACHE_DIR", f"{HOME_DIR}/.triton/cache"),
)


# vLLM's --shutdown-timeout (drain requests in flight on SIGTERM) exists from 0.18.0 on
SHUTDOWN_TIMEOUT_SINCE = (0, 18)
_VERSION_TAG = re.compile(r":v?(\d+)\.(\d+)(?:\.\d+)?(?:[.+-][\w.+-]*)?$")


def image_vllm_version(image_ref: str) -> tuple[int, int] | None:
    """(major, minor) of vLLM as an image's tag spells it (`vllm/vllm-openai:v0.10.1`,
    `...:0.32.0-cpu`); None: the tag says no version (`latest`, a digest, a custom tag)."""
    ref = image_ref.split("@", 1)[0]
    m = _VERSION_TAG.search(ref.rsplit("/", 1)[-1])
    return (int(m[1]), int(m[2])) if m else None


def server_args(spec: VLLMServiceSpec, image_ref: str | None = None) -> list[str]:
    """vLLM server arguments, in a fixed order so the pod template hash is stable.
    `image_ref`: the image they are for (a flag newer than the vLLM its tag names is left out).

    tests/vllm/test_server_args.py parses them with the pinned vLLM's own argument parser.
    """
    e = spec.engine
    args = [
        "--model",
        spec.model.reference,
        "--served-model-name",
        spec.served_model_name,
        "--host",
        "0.0.0.0",  # noqa: S104 (inside the pod; the Service is the way in)
        "--port",
        str(spec.port),
        "--tensor-parallel-size",
        str(e.tensor_parallel_size),
    ]
    if not spec.resources.on_cpu:
        # on CPU vLLM applies this fraction to the node's memory; the KV-cache size rules there
        args += ["--gpu-memory-utilization", repr(e.gpu_memory_utilization)]
    args += [
        "--dtype",
        e.dtype,
        "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching",
    ]
    optional: list[tuple[str, object | None]] = [
        ("--revision", spec.model.revision),
        ("--max-model-len", e.max_model_len),
        ("--block-size", e.block_size),
        ("--max-num-seqs", e.max_num_seqs),
        ("--kv-cache-memory-bytes", spec.kv_cache_bytes),
        ("--quantization", e.quantization),
        ("--kv-cache-dtype", None if e.kv_cache_dtype == "auto" else e.kv_cache_dtype),
    ]
    args += [part for flag, value in optional if value is not None for part in (flag, str(value))]
    if e.speculative_config is not None:
        args += [
            "--speculative-config",
            json.dumps(e.speculative_config, sort_keys=True, separators=(",", ":")),
        ]
    if e.enforce_eager:
        args.append("--enforce-eager")
    if e.log_requests:
        args.append("--enable-log-requests")
    # requests in flight finish when the pod is told to stop (after the preStop pause the
    # endpoints are gone: no new ones arrive); an image older than the flag aborts them
    version = image_vllm_version(image_ref) if image_ref else None
    if spec.shutdown_timeout > 0 and (version is None or version >= SHUTDOWN_TIMEOUT_SINCE):
        args += ["--shutdown-timeout", str(spec.shutdown_timeout)]
    return args + list(e.extra_args)


def _env(spec: VLLMServiceSpec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    if spec.model_cache.type != "None":
        env.append({"name": "HF_HOME", "value": spec.model_cache.mount_path})
    if spec.hugging_face_token is not None:
        ref = spec.hugging_face_token
        env.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
        )
    if spec.api_key is not None:
        ref = spec.api_key
        env.append(
            {
                "name": "VLLM_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
            }
        )
    if spec.resources.on_cpu:
        # vLLM's processes find each other at this address; unset, vLLM guesses it from the
        # route towards 8.8.8.8 (vllm/utils/network_utils.py get_ip), or falls back to 0.0.0.0
        # on a pod network without a default route. The pod's own IP needs no guess.
        env.append(
            {
                "name": "VLLM_HOST_IP",
                # apiVersion as the API server defaults it, so live and desired compare equal
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
            }
        )
    for var in spec.env:
        item: dict[str, Any] = {"name": var.name}
        if var.value is not None:
            item["value"] = var.value
        if var.value_from is not None:
            item["valueFrom"] = copy.deepcopy(var.value_from)
        env.append(item)
    return env


def _resources(spec: VLLMServiceSpec) -> dict[str, Any]:
    r = spec.resources
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if r.gpus:
        requests[r.gpu_resource_name] = limits[r.gpu_resource_name] = str(r.gpus)
    if r.cpu:
        requests["cpu"] = r.cpu
        if r.on_cpu:
            # Guaranteed QoS: the static CPU manager then pins whole cores, the ones vLLM's
            # CPU backend binds its OpenMP threads to (it binds to every core it may use)
            limits["cpu"] = r.cpu
    if r.memory:
        requests["memory"] = limits["memory"] = r.memory
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _volumes(spec: VLLMServiceSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {
            "name": "dshm",
            "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shared_memory},
        }
    ]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    cache = spec.model_cache
    if cache.type == "EmptyDir":
        empty: dict[str, Any] = {"sizeLimit": cache.size_limit} if cache.size_limit else {}
        volumes.append({"name": "model-cache", "emptyDir": empty})
    elif cache.type == "PVC":
        volumes.append(
            {"name": "model-cache", "persistentVolumeClaim": {"claimName": cache.claim_name}}
        )
    if cache.type != "None":
        mounts.append({"name": "model-cache", "mountPath": cache.mount_path})
    if spec.model.pvc is not None:
        volumes.append(
            {
                "name": "model",
                "persistentVolumeClaim": {"claimName": spec.model.pvc.claim_name, "readOnly": True},
            }
        )
        mounts.append({"name": "model", "mountPath": MODEL_PVC_MOUNT, "readOnly": True})
    return volumes, mounts


# on a pod template whose startup probe follows the measured starts (probes.startupBudget
# Measured): the mode (part of the revision), and the budget decided for the revision with what
# it follows (decide/startup.py; not part of the revision: revision_body leaves it out, with
# the startup probe's failureThreshold)
STARTUP_BUDGET_ANNOTATION = f"{GROUP}/startup-budget"
STARTUP_BUDGET_BASIS_ANNOTATION = f"{GROUP}/startup-budget-basis"


def revision_body(pod_template: dict[str, Any]) -> dict[str, Any]:
    """The pod template as its revision is hashed: a measured startup budget left out (the same
    revision whatever budget its rollout was given)."""
    annotations = (pod_template.get("metadata") or {}).get("annotations") or {}
    if annotations.get(STARTUP_BUDGET_ANNOTATION) != "Measured":
        return pod_template
    out = copy.deepcopy(pod_template)
    out["metadata"]["annotations"].pop(STARTUP_BUDGET_BASIS_ANNOTATION, None)
    for c in out.get("spec", {}).get("containers") or []:
        if isinstance(c.get("startupProbe"), dict):
            c["startupProbe"].pop("failureThreshold", None)
    return out


def startup_probe_seconds(pod_template: dict[str, Any]) -> int | None:
    """What the server container's startup probe allows (failureThreshold x periodSeconds)."""
    for c in (pod_template.get("spec") or {}).get("containers") or []:
        if c.get("name") == CONTAINER and isinstance(probe := c.get("startupProbe"), dict):
            failures, period = probe.get("failureThreshold"), probe.get("periodSeconds", 10)
            if isinstance(failures, int) and isinstance(period, int):
                return failures * period
    return None


def startup_budget_basis(pod_template: dict[str, Any]) -> dict[str, Any]:
    """What the template's measured budget was decided from (with_startup_budget's basis)."""
    annotations = (pod_template.get("metadata") or {}).get("annotations") or {}
    try:
        basis = json.loads(annotations.get(STARTUP_BUDGET_BASIS_ANNOTATION) or "{}")
    except ValueError:
        return {}
    return basis if isinstance(basis, dict) else {}


def with_startup_budget(
    pod_template: dict[str, Any], seconds: int, basis: dict[str, Any]
) -> dict[str, Any]:
    """The template with its startup probe allowing `seconds` (rounded up to whole periods),
    `basis` (what it follows) annotated. Only for a template of startupBudget Measured."""
    out = copy.deepcopy(pod_template)
    out["metadata"]["annotations"][STARTUP_BUDGET_BASIS_ANNOTATION] = json.dumps(
        basis, sort_keys=True, separators=(",", ":")
    )
    for c in out["spec"]["containers"]:
        if c.get("name") == CONTAINER and isinstance(probe := c.get("startupProbe"), dict):
            probe["failureThreshold"] = max(1, -(-seconds // int(probe["periodSeconds"])))
    return out


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PORT_NAME},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
        "successThreshold": 1,
    }


def _scheduling(spec: VLLMServiceSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node_selector = dict(spec.node_selector)
    if spec.resources.gpu_product:
        node_selector[GPU_PRODUCT_LABEL] = spec.resources.gpu_product
    if node_selector:
        out["nodeSelector"] = node_selector
    tolerations = [copy.deepcopy(t) for t in spec.tolerations]
    if not spec.resources.on_cpu and not any(
        t.get("key") == spec.resources.gpu_resource_name for t in tolerations
    ):
        # GPU node pools are commonly tainted with the GPU resource name (GKE, AKS, EKS docs)
        tolerations.append(
            {"key": spec.resources.gpu_resource_name, "operator": "Exists", "effect": "NoSchedule"}
        )
    if tolerations:
        out["tolerations"] = tolerations
    if spec.affinity is not None:
        out["affinity"] = copy.deepcopy(spec.affinity)
    if spec.priority_class_name:
        out["priorityClassName"] = spec.priority_class_name
    if spec.runtime_class_name:
        out["runtimeClassName"] = spec.runtime_class_name
    if spec.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    return out


def image(spec: VLLMServiceSpec, settings: OperatorSettings) -> str:
    """spec.image, or the operator's default vLLM image for the accelerator."""
    if spec.image:
        return spec.image
    return settings.cpu_image if spec.resources.on_cpu else settings.gpu_image


def pod_security_context(settings: OperatorSettings) -> dict[str, Any]:
    """The pod's securityContext: Pod Security "restricted" or "baseline" (the container adds
    allowPrivilegeEscalation: false and drops every capability in both)."""
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if settings.vllm_pod_security == "restricted":
        context.update(
            runAsNonRoot=True,
            runAsUser=NON_ROOT_ID,
            runAsGroup=NON_ROOT_ID,
            fsGroup=NON_ROOT_ID,
            fsGroupChangePolicy="OnRootMismatch",
        )
    return context


def _home(
    spec: VLLMServiceSpec, settings: OperatorSettings
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts, env) of a writable HOME for the non-root user (HOME_ENV); none in
    "baseline", and none of HOME_ENV's variables that spec.env sets (the user's wins)."""
    if settings.vllm_pod_security != "restricted":
        return [], [], []
    own = {v.name for v in spec.env}
    env = [{"name": name, "value": value} for name, value in HOME_ENV if name not in own]
    return (
        [{"name": "home", "emptyDir": {}}],
        [{"name": "home", "mountPath": HOME_DIR}],
        env,
    )


def _between(mounts: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An emptyDir at every folder between HOME and a mount below it (/root/.cache for the
    model cache at /root/.cache/huggingface). The runtime creates such a folder itself, as
    root, to mount into: the non-root user could not write in it, and torch's inductor cache
    (/root/.cache/torchinductor), vLLM's (~/.cache/vllm) and FlashInfer's would fail with
    PermissionError at start-up (seen on the H200: benchmarks/gpu/results). An emptyDir is
    world-writable, whatever uid the pod runs as."""
    taken = {m["mountPath"].rstrip("/") for m in mounts}
    between: set[str] = set()
    for path in taken:
        if not path.startswith(HOME_DIR + "/"):
            continue
        parts = path[len(HOME_DIR) + 1 :].split("/")
        for depth in range(1, len(parts)):
            folder = HOME_DIR + "/" + "/".join(parts[:depth])
            if folder not in taken:
                between.add(folder)
    ordered = sorted(between)
    names = [f"home-{i}" for i in range(len(ordered))]
    return (
        [{"name": n, "emptyDir": {}} for n in names],
        [{"name": n, "mountPath": p} for n, p in zip(names, ordered, strict=True)],
    )


def render_pod_template(svc: Service, settings: OperatorSettings) -> dict[str, Any]:
    spec = svc.spec
    volumes, mounts = _volumes(spec)
    home_volumes, home_mounts, home_env = _home(spec, settings)
    volumes, mounts = volumes + home_volumes, mounts + home_mounts
    if home_mounts:
        between_volumes, between_mounts = _between(mounts)
        volumes, mounts = volumes + between_volumes, mounts + between_mounts
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image(spec, settings),
        "imagePullPolicy": spec.image_pull_policy,
        # the module, not the `vllm` console script: works in every vllm-openai image
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "args": server_args(spec, image(spec, settings)),
        # a server that exits at start (an engine argument vLLM refuses) leaves the end of its
        # log as the termination message: the status quotes it (observed.pod_problems)
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "ports": [{"name": PORT_NAME, "containerPort": spec.port, "protocol": "TCP"}],
        "env": home_env + _env(spec),
        "resources": _resources(spec),
        "volumeMounts": mounts,
        "startupProbe": _probe(
            "/health", spec.probes.period_seconds, spec.startup_failure_threshold
        ),
        "readinessProbe": _probe(
            "/health", spec.probes.period_seconds, spec.probes.readiness_failure_threshold
        ),
        "livenessProbe": _probe(
            "/health", spec.probes.period_seconds, spec.probes.liveness_failure_threshold
        ),
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if spec.drain_seconds:
        # stop receiving traffic before vLLM shuts down; the native sleep action needs no shell
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": spec.drain_seconds}}}
    if not container["env"]:
        del container["env"]
    if not container["resources"]:
        del container["resources"]
    pod_labels = {**spec.pod_labels, **labels(svc)}
    annotations = {
        **spec.pod_annotations,
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(spec.port),
        "prometheus.io/path": "/metrics",
    }
    if spec.probes.startup_budget == "Measured":
        # until a budget is decided for the revision (with_startup_budget): the fixed one
        annotations[STARTUP_BUDGET_ANNOTATION] = "Measured"
    return {
        "metadata": {"labels": pod_labels, "annotations": annotations},
        "spec": {
            "containers": [container],
            "volumes": volumes,
            "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
            # a Service named like "vllm" would inject VLLM_PORT=tcp://..., which vLLM reads
            "enableServiceLinks": False,
            # vLLM never calls the Kubernetes API: no token for whatever the namespace's default
            # ServiceAccount may do
            "automountServiceAccountToken": False,
            "securityContext": pod_security_context(settings),
            **_scheduling(spec),
        },
    }


def render_deployment(
    svc: Service,
    settings: OperatorSettings,
    live_replicas: int | None = None,
    *,
    template: dict[str, Any] | None = None,
    live_held: str | None = None,
    live_since: str | None = None,
    now: str | None = None,
    replicas_owned_elsewhere: bool = False,
    no_room_for_surge: str = "",
) -> dict[str, Any]:
    """`template`: a pod template to run instead of the spec's (a rollback's).
    `no_room_for_surge`: the revision whose rollout found no room for a surge pod (surges).
    `live_replicas`,
    `live_held` and `live_since`: the live Deployment's replicas, REPLICAS_HELD_ANNOTATION and
    REPLICAS_HELD_SINCE_ANNOTATION; `now`: the reconcile's time (RFC 3339).
    `replicas_owned_elsewhere`: another field manager (the HPA's scale) owns spec.replicas of the
    live Deployment (`replicas_managers`): with autoscaling on, the rendering leaves replicas out,
    so server-side apply hands the field over (it stays at the autoscaler's value, owned by it)
    and no apply of the operator can put back a count read before the autoscaler changed it."""
    spec = svc.spec
    replicas, held, since = decide_replicas(
        svc,
        live_replicas,
        live_held,
        live_since=live_since,
        now=now,
        hold_seconds=settings.replicas_hold_seconds,
    )
    meta = metadata(svc)
    if held is not None:
        meta["annotations"] = {REPLICAS_HELD_ANNOTATION: held}
        if since is not None:
            meta["annotations"][REPLICAS_HELD_SINCE_ANNOTATION] = since
    if no_room_for_surge:
        meta.setdefault("annotations", {})[SURGE_REFUSED_ANNOTATION] = no_room_for_surge
    if spec.rollout.strategy == "Recreate":
        strategy: dict[str, Any] = {"type": "Recreate"}
    elif surges(svc) and not no_room_for_surge:
        strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    else:
        strategy = {
            "type": "RollingUpdate",
            "rollingUpdate": {
                "maxSurge": spec.rollout.max_surge,
                "maxUnavailable": spec.rollout.max_unavailable,
            },
        }
    # (min/max bounds are then the HPA's to keep: it scales into them itself)
    leave_replicas = svc.spec.autoscaling.enabled and replicas_owned_elsewhere
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            **({} if leave_replicas else {"replicas": replicas}),
            "selector": {"matchLabels": selector_labels(svc)},
            "strategy": strategy,
            "revisionHistoryLimit": 10,
            # a slow model load must not mark the rollout failed before the startup budget ends
            "progressDeadlineSeconds": spec.probes.startup_timeout_seconds + 600,
            "template": template if template is not None else render_pod_template(svc, settings),
        },
    }


def surges(svc: Service) -> bool:
    """A one-replica service (autoscaling off) whose rollout would take its only pod down
    (maxUnavailable 1 or more) rolls out with a surge pod instead (oneReplicaSurge)."""
    r = svc.spec.rollout
    return (
        r.one_replica_surge is not False
        and r.strategy == "RollingUpdate"
        and r.max_unavailable > 0
        and not svc.spec.autoscaling.enabled
        and svc.spec.replicas == 1
    )


def surge_refused(svc: Service, rev: str, live: dict[str, Any] | None, no_room: bool) -> str:
    """The SURGE_REFUSED_ANNOTATION value: `rev` (the revision rendered now) when a surge
    applies and its rollout found no room for the surge pod (`no_room`: a new pod waits for
    room) or found none earlier (the live annotation names it); "" otherwise."""
    if not surges(svc) or live is None:
        return ""
    annotations = live.get("metadata", {}).get("annotations") or {}
    return rev if no_room or annotations.get(SURGE_REFUSED_ANNOTATION) == rev else ""


def replicas_managers(live: dict[str, Any] | None, field_manager: str) -> set[str]:
    """The field managers other than `field_manager` that own the live Deployment's
    spec.replicas (metadata.managedFields): the HPA's scale updates, a `kubectl scale`."""
    out: set[str] = set()
    for entry in (live or {}).get("metadata", {}).get("managedFields") or []:
        if entry.get("manager") == field_manager and entry.get("operation") == "Apply":
            continue
        spec = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if "f:replicas" in spec:
            out.add(str(entry.get("manager")))
    return out


def _seconds_between(earlier: str, later: str) -> float | None:
    try:
        a = dt.datetime.fromisoformat(earlier.replace("Z", "+00:00"))
        b = dt.datetime.fromisoformat(later.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (b - a).total_seconds()


def decide_replicas(
    svc: Service,
    live_replicas: int | None,
    live_held: str | None,
    *,
    live_since: str | None = None,
    now: str | None = None,
    hold_seconds: float = 300.0,
) -> tuple[int, str | None, str | None]:
    """The Deployment's replicas, the REPLICAS_HELD_ANNOTATION value to set (None: none) and
    the REPLICAS_HELD_SINCE_ANNOTATION value (when a hold in force began; None: none).

    With autoscaling on, the HPA owns the count: the operator re-applies whatever is live
    (within min/max), so it never fights the autoscaler; a new Deployment starts at
    minReplicas. The annotation records spec.replicas at that time.

    Switching autoscaling off keeps the count the autoscaler chose (no drop from, say, 5 busy
    replicas to spec.replicas' 1 at once) for as long as spec.replicas stays what it was while
    autoscaling was on; the first change of spec.replicas (`kubectl scale vsvc`, an edit)
    applies it and ends the hold. A hold also ends on its own `hold_seconds` after it began
    (the status says when: `kubectl scale vsvc --replicas=N` with the count spec.replicas
    already has changes nothing the operator could see), and at once when the service carries
    the release-replicas-hold annotation. Without a hold, spec.replicas is the count.
    """
    a = svc.spec.autoscaling
    held_for = str(svc.spec.replicas)
    if a.enabled:
        floor = max(1, a.min_replicas)  # (zero is decide/zero.py's to set, not a floor)
        if live_replicas is None:
            return floor, held_for, None
        return min(max(live_replicas, floor), a.max_replicas), held_for, None
    if (
        live_replicas is not None
        and live_held == held_for
        and live_replicas != svc.spec.replicas
        and not svc.release_hold
        and hold_seconds > 0
    ):
        since = live_since or now
        elapsed = _seconds_between(since, now) if since and now else None
        if elapsed is None or elapsed < hold_seconds:
            return live_replicas, held_for, since
    return svc.spec.replicas, None, None
