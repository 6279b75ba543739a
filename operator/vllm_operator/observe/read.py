"""Step "observe" of the flow: read-only gathering of everything a reconcile decides on -
the Deployment and its pods, the autoscaler, whether the Prometheus Operator is there, and
the benchmark history with its Jobs. No writes here."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from typing import Any, Protocol

from vllm_operator import API_VERSION, KIND
from vllm_operator.api.records import LiveWorkload, Run
from vllm_operator.api.spec import Service
from vllm_operator.observe.benchresult import (
    RUN_STATES,
    SUMMARY_KEY,
    brief,
    clip,
    left_out,
    read_job_report,
    read_summary,
    summarize,
)
from vllm_operator.observe.live import (
    MIN_WORKLOAD_WINDOW_SECONDS,
    READ_BUDGET_SECONDS,
    WORKLOAD_WINDOW_SECONDS,
    LiveReader,
)
from vllm_operator.observe.startup import MAX_LOG_BYTES, PodStart, pod_start
from vllm_operator.observe.state import (
    MESSAGE_TAIL,
    Bake,
    JobState,
    LiveFigures,
    Observed,
    PodProblem,
    ZeroObserved,
    pod_problems,
    rolled_out,
    written_generation,
)
from vllm_operator.render.benchmark import (
    COMPONENT,
    CONFIRMATION_KEY,
    LIVE_WORKLOAD_KEY,
    MESSAGE_KEY,
    RECORD_COMPONENT,
    REVISION_ANNOTATION,
    REVISION_LABEL,
    SERVED_BEFORE_KEY,
    SPEC_HASH_KEY,
    SPEC_KEY,
    STATE_KEY,
    VERDICT_FAILURES_KEY,
    VERDICT_KEY,
    record_name,
    recorded_target,
)
from vllm_operator.render.canary import bake_endpoints_name, canary_name, canary_selector
from vllm_operator.render.deployment import CONTAINER
from vllm_operator.render.holder import HOLDER, holder_ports, pod_holds, zero_services
from vllm_operator.render.meta import SERVICE_LABEL, selector_labels
from vllm_operator.render.monitoring import MONITORING_API

log = logging.getLogger("vllm_operator")


class Reader(Protocol):
    """What observe needs of the API client: reads only (write.transport.Kube is one; the
    reconcile hands it its Writer, and observe sees only this)."""

    @property
    def generation_annotation(self) -> str:
        """The annotation holding the service generation whose rendering last wrote a child."""

    def get(
        self, api_version: str, kind: str, namespace: str, name: str, *, cached: bool = False
    ) -> dict[str, Any] | None:
        """One object (None: not found); `cached`: from the watch cache whatever the kind."""

    def list_children(
        self, api_version: str, kind: str, namespace: str, selector: str
    ) -> list[dict[str, Any]]:
        """The objects of `kind` matching the label `selector`."""

    def serves(self, group_version: str, plurals: set[str]) -> bool:
        """The API server serves every resource in `plurals` of `group_version`."""

    def events_of(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        """The Events of one object."""

    def pod_log(self, namespace: str, pod: str, container: str, limit_bytes: int) -> str:
        """The first `limit_bytes` of a container's log."""


def _baking_pod_problem(
    refs: dict[str | None, str | None],
    canary_pods: tuple[dict[str, Any], ...],
    since: dt.datetime | None,
) -> str:
    """What happened to the canary's pod in the bake ("": it serves as it did when the bake
    began): gone (deleted, evicted, its node drained), replaced (same name, another uid), not
    Ready, or a container that restarted or stopped since the bake began (`since`)."""
    name, uid = next(iter(refs.items()), (None, None))
    pod = next((p for p in canary_pods if p["metadata"]["name"] == name), None)
    if not name or pod is None:
        return f"the canary's pod {name} in the bake is gone (deleted, evicted or drained)"
    meta, status = pod["metadata"], pod.get("status") or {}
    problems = [
        f"the canary's pod {name} in the bake was replaced"
        if uid and meta.get("uid") not in (None, uid)
        else "",
        f"the canary's pod {name} in the bake is being deleted"
        if meta.get("deletionTimestamp")
        else "",
        *(_container_problem(c, since) for c in status.get("containerStatuses") or []),
        ""
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        else f"the canary's pod {name} is not Ready (its readiness probe fails)",
    ]
    return next((p for p in problems if p), "")


def _container_problem(c: dict[str, Any], since: dt.datetime | None) -> str:
    state = c.get("state") or {}
    last = (c.get("lastState") or {}).get("terminated") or {}
    if "running" not in state:
        why = (state.get("waiting") or state.get("terminated") or {}).get("reason", "")
        return f"the canary's container {c.get('name')} stopped ({why or 'not running'})"
    if since is not None and _after(last.get("finishedAt"), since):
        return (
            f"the canary's container {c.get('name')} restarted during the bake (exit "
            f"{last.get('exitCode')}, {last.get('reason', '')}; restarts "
            f"{c.get('restartCount', 0)})"
        )
    return ""


def _after(at: str | None, since: dt.datetime) -> bool:
    parsed = _parse(str(at)) if at else None
    return parsed is not None and parsed >= since


def stamp(at: dt.datetime) -> str:
    """A time as the status writes times (UTC, to the second)."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(stamp_: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(stamp_.replace("Z", "+00:00"))
    except ValueError:
        return None


def recorded_bake_start(recorded: dict[str, Any], canary: dict[str, Any] | None) -> str:
    """When the status says the canary's revision began to bake ("": no bake of it recorded):
    the operator's own record, on its own clock."""
    revision = ((canary or {}).get("metadata", {}).get("annotations") or {}).get(
        REVISION_ANNOTATION, ""
    )
    started = (recorded.get("bake") or {}).get("startedAt") or ""
    if not revision or recorded.get("revision") != revision or recorded.get("phase") != "Baking":
        return ""
    return str(started) if _parse(str(started)) is not None else ""


def _bake(
    reader: Reader,
    svc: Service,
    canary_pods: tuple[dict[str, Any], ...],
    live: LiveReader | None,
    *,
    now: dt.datetime,
    recorded_start: str,
) -> Bake | None:
    """The canary's bake, while its EndpointSlice puts it in the Service's endpoints: since
    when, and its live figures against the stable pods' over that window (from Prometheus).
    One clock for each comparison: the bake's age is the operator's clock since the start the
    operator recorded on that clock (`recorded_start`; "": none recorded, it begins `now`),
    never the operator's clock against the API server's; whether the pod changed during the
    bake compares the pod's stamps with the slice's, both the cluster's."""
    slice_ = reader.get(
        "discovery.k8s.io/v1", "EndpointSlice", svc.namespace, bake_endpoints_name(svc)
    )
    if slice_ is None or not _owned(slice_, svc):
        return None
    since = _parse(slice_["metadata"].get("creationTimestamp", ""))
    started = recorded_start or stamp(now)
    began = _parse(started) or now
    elapsed = max(0.0, (now - began).total_seconds())
    if live is None:
        return Bake(
            started,
            elapsed,
            error="no Prometheus to read (the operator's "
            "prometheusUrl setting, VLLM_OPERATOR_PROMETHEUS_URL, is empty)",
        )
    refs = {
        e.get("targetRef", {}).get("name"): e.get("targetRef", {}).get("uid")
        for e in slice_.get("endpoints") or []
    }
    pods = [p["metadata"]["name"] for p in canary_pods if p["metadata"]["name"] in refs]
    problem = _baking_pod_problem(refs, canary_pods, since)
    if problem:
        return Bake(started, elapsed, pod_problem=problem)
    window = int(elapsed) + 1
    covered = float(max(window, live.min_window_seconds))
    half = int(elapsed / 2) + 1  # the most recent half, once it is a window of its own
    canary_sel, stable_sel = f'pod="{pods[0]}"', f'service="{svc.name}"'
    recent: tuple[LiveFigures, LiveFigures] | None = None
    # a bounded cost per reconcile: at most 4 reads (QUERIES_PER_READ queries each), each query
    # under the client's timeout, none begun past the budget; the first failure ends them all
    deadline = time.monotonic() + READ_BUDGET_SECONDS
    try:
        canary = live.figures(svc.namespace, canary_sel, window, deadline)
        stable = live.figures(svc.namespace, stable_sel, window, deadline)
        if half >= live.min_window_seconds:
            recent = (
                live.figures(svc.namespace, canary_sel, half, deadline),
                live.figures(svc.namespace, stable_sel, half, deadline),
            )
    except Exception as exc:  # noqa: BLE001  (any failure of the read: no verdict, said why)
        log.warning("reading the bake's figures of %s/%s: %s", svc.namespace, svc.name, exc)
        return Bake(started, elapsed, error=f"reading Prometheus failed: {exc}"[:500])
    return Bake(
        started,
        elapsed,
        canary=canary,
        stable=stable,
        window=covered,
        recent_canary=recent[0] if recent else None,
        recent_stable=recent[1] if recent else None,
    )


def observe(
    reader: Reader,
    svc: Service,
    *,
    after_writes: bool = False,
    live: LiveReader | None = None,
    recorded_rollout: dict[str, Any] | None = None,
    revision: str = "",
    recorded_startup: dict[str, Any] | None = None,
    recorded_ready: int | None = None,
) -> Observed:
    """Everything a reconcile decides on, read before anything is written. `after_writes`:
    the second look, after the reconcile's own writes: the Deployment comes from the watch
    cache, which holds what those writes answered (the first look reads it from the API
    server: the generation guard needs the latest). `live`: where a canary's bake reads its
    live figures (None: no Prometheus configured). `recorded_rollout`: status.rollout as the
    operator last wrote it (its record of a bake that began, and when). `revision`: the
    spec's revision; while it has no run yet, the live workload is read for the run to start
    (an objective that names no workload shape). `recorded_startup`, `recorded_ready`:
    status.startup and status.readyReplicas as last written: a pod Ready since (more Ready
    than recorded), or none recorded yet, has its start read (observe/startup.py)."""
    now = dt.datetime.now(dt.UTC)
    recorded = dict(recorded_rollout or {})
    deployment = reader.get("apps/v1", "Deployment", svc.namespace, svc.name, cached=after_writes)
    hpa = None
    if svc.spec.autoscaling.enabled:
        hpa = reader.get("autoscaling/v2", "HorizontalPodAutoscaler", svc.namespace, svc.name)
    problems: tuple[PodProblem, ...] = ()
    waiting: tuple[PodProblem, ...] = ()
    serving_pods: list[dict[str, Any]] | None = None
    if deployment is not None:
        ready = deployment.get("status", {}).get("readyReplicas", 0)
        wanted = deployment.get("spec", {}).get("replicas", 0)
        # only look at pods when something is missing, or a rollout is under way (a surge
        # pod that waits for room: render/deployment.surge_refused)
        if ready < wanted or not rolled_out(deployment):
            selector = ",".join(f"{k}={v}" for k, v in selector_labels(svc).items())
            serving_pods = reader.list_children("v1", "Pod", svc.namespace, selector)
            problems, waiting = pod_problems(serving_pods)
    jobs: tuple[JobState, ...] = ()
    runs: tuple[Run, ...] = ()
    if svc.spec.benchmark.enabled:
        # the Jobs before the history: a Job seen finished has published its result (the
        # runner publishes before it exits), so the history read after it has the result
        jobs = tuple(
            job_state(j, reader.generation_annotation, _failed_pods(reader, svc, j))
            for j in _jobs(reader, svc)
        )
        runs = tuple(history(reader, svc))
    pods = None
    if deployment is not None and svc.spec.benchmark.enabled and _measuring(deployment, runs):
        selector = ",".join(f"{k}={v}" for k, v in selector_labels(svc).items())
        pods = tuple(reader.list_children("v1", "Pod", svc.namespace, selector))
    # the canary, from the watch cache (its writes are the operator's own): read wherever
    # one may be wanted, or left from a canary that is not (the prune removes it)
    canary = canary_pods = None
    canary_problems: tuple[PodProblem, ...] = ()
    canary_waiting: tuple[PodProblem, ...] = ()
    if deployment is not None:
        canary = reader.get("apps/v1", "Deployment", svc.namespace, canary_name(svc), cached=True)
    if canary is not None and not _owned(canary, svc):
        canary = None
    if canary is not None:
        selector = ",".join(f"{k}={v}" for k, v in canary_selector(svc).items())
        canary_pods = tuple(reader.list_children("v1", "Pod", svc.namespace, selector))
        canary_problems, canary_waiting = pod_problems(list(canary_pods))
    bake = None
    # (the first look only: the decision reads it; the look after the writes feeds the status,
    # which reports the bake as decided)
    if (
        canary is not None
        and svc.spec.rollout.canary_settings.bake is not None
        and not after_writes
    ):
        bake = _bake(
            reader,
            svc,
            canary_pods or (),
            live,
            now=now,
            recorded_start=recorded_bake_start(recorded, canary),
        )
    workload = None if after_writes else _live_workload(svc, live, runs, revision, now)
    starts: tuple[PodStart, ...] = ()
    if not after_writes:
        starts = _starts(
            reader,
            svc,
            deployment=deployment if deployment is not None and _owned(deployment, svc) else None,
            serving_pods=serving_pods,
            canary=canary,
            canary_pods=canary_pods or (),
            recorded=recorded_startup,
            recorded_ready=recorded_ready,
        )
    zero = None if after_writes else _zero(reader, svc, live)
    return Observed(
        deployment=deployment,
        hpa=hpa,
        pod_problems=problems,
        pods_waiting=waiting,
        # the PrometheusRule/PodMonitor only where the Prometheus Operator's CRDs are
        # served; elsewhere the status says so (Monitoring=False)
        monitoring_crds=reader.serves(MONITORING_API, {"prometheusrules", "podmonitors"}),
        runs=runs,
        jobs=jobs,
        # (a Deployment of an earlier service of the same name, not yet collected, is not
        # this one's: its generations count for nothing here)
        written_generation=written_generation(deployment, reader.generation_annotation)
        if deployment is not None and _owned(deployment, svc)
        else 0,
        pods=pods,
        canary=canary,
        canary_pods=canary_pods,
        canary_problems=canary_problems,
        canary_waiting=canary_waiting,
        bake=bake,
        recorded_rollout=recorded,
        live_workload=workload,
        starts=starts,
        observed_at=stamp(now),
        zero=zero,
    )


def _zero(reader: Reader, svc: Service, live: LiveReader | None) -> ZeroObserved | None:
    """What scale to zero reads (None: the service may not go to zero)."""
    if not svc.spec.autoscaling.to_zero:
        return None
    bodies = reader.list_children(API_VERSION, KIND, svc.namespace, "")
    services = []
    for body in bodies:
        try:
            services.append(Service.from_body(body))
        except ValueError:  # (an invalid spec of another service: it holds nothing)
            continue
    # a pod holds this service if it was started for it at the port it has now (any set:
    # while the holder rolls to a new set, the old pods go on holding the services they had)
    port = holder_ports(zero_services([*services, svc], svc.namespace))[svc.name]
    selector = f"app.kubernetes.io/name={HOLDER}"
    pods = tuple(
        sorted(
            (p["metadata"]["name"], p["metadata"]["uid"], p["status"]["podIP"])
            for p in reader.list_children("v1", "Pod", svc.namespace, selector)
            if pod_holds(p).get(svc.name) == port
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("podIP")
            and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        )
    )
    idle: bool | None = None
    if live is not None:
        try:
            idle = live.idle(svc.namespace, svc.name, svc.spec.autoscaling.idle_seconds)
        except Exception as exc:  # noqa: BLE001  (Prometheus down or slow: not known)
            log.warning("reading whether %s/%s is idle failed: %s", svc.namespace, svc.name, exc)
    return ZeroObserved(services=tuple(services), holder_pods=pods, idle=idle)


def _live_workload(
    svc: Service, live: LiveReader | None, runs: tuple[Run, ...], revision: str, now: dt.datetime
) -> LiveWorkload | None:
    """The live traffic shape for the spec's revision's run to start (None: not wanted, not
    enough traffic, or Prometheus could not answer)."""
    window = _workload_window(runs, now)
    if live is None or not window or not _wants_workload(svc, runs, revision):
        return None
    try:
        return live.workload(
            svc.namespace, svc.name, window, time.monotonic() + READ_BUDGET_SECONDS
        )
    except Exception as exc:  # noqa: BLE001  (Prometheus down or slow: the default shape)
        log.warning(
            "%s/%s: the live workload shape could not be read from Prometheus (%s); the "
            "benchmark sends the runner's default",
            svc.namespace,
            svc.name,
            exc,
        )
        return None


def _starts(
    reader: Reader,
    svc: Service,
    *,
    deployment: dict[str, Any] | None,
    serving_pods: list[dict[str, Any]] | None,
    canary: dict[str, Any] | None,
    canary_pods: tuple[dict[str, Any], ...],
    recorded: dict[str, Any] | None,
    recorded_ready: int | None,
) -> tuple[PodStart, ...]:
    """The starts of the serving and canary pods Ready since the last status: looked for where
    the Deployment has more Ready pods than the status recorded, none recorded yet, or the pods
    were listed anyway (the watch cache's: no request)."""
    starts: tuple[PodStart, ...] = ()
    if deployment is not None:
        ready = int(deployment.get("status", {}).get("readyReplicas") or 0)
        if ready > 0 and (
            serving_pods is not None or not recorded or ready > (recorded_ready or 0)
        ):
            if serving_pods is None:
                selector = ",".join(f"{k}={v}" for k, v in selector_labels(svc).items())
                serving_pods = reader.list_children("v1", "Pod", svc.namespace, selector)
            annotations = (deployment.get("metadata") or {}).get("annotations") or {}
            rev = str(annotations.get(REVISION_ANNOTATION, ""))
            starts += _read_starts(reader, svc, serving_pods, rev, recorded)
    if canary is not None and canary_pods:
        annotations = (canary.get("metadata") or {}).get("annotations") or {}
        rev = str(annotations.get(REVISION_ANNOTATION, ""))
        starts += _read_starts(reader, svc, list(canary_pods), rev, recorded)
    return starts


def _read_starts(
    reader: Reader,
    svc: Service,
    pods: list[dict[str, Any]],
    revision: str,
    recorded: dict[str, Any] | None,
) -> tuple[PodStart, ...]:
    """The starts of the Ready pods whose start is not recorded yet: their Pulled event and
    the start of the server's log, read once per pod. A read refused (RBAC without pods/log or
    events list) leaves those phases out; the start is recorded all the same."""
    known = {r.get("uid") for r in (recorded or {}).get("recent") or [] if isinstance(r, dict)}
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("uid") in known or meta.get("deletionTimestamp"):
            continue
        if pod_start(pod, revision, CONTAINER) is None:  # not Ready yet
            continue
        name = str(meta.get("name", ""))
        events: list[dict[str, Any]] = []
        log_text = ""
        try:
            events = reader.events_of(svc.namespace, "Pod", name)
            log_text = reader.pod_log(svc.namespace, name, CONTAINER, MAX_LOG_BYTES)
        except Exception as exc:  # noqa: BLE001  (refused, failed: those phases left out)
            log.warning(
                "%s/%s: the start of pod %s, read in part: %s", svc.namespace, svc.name, name, exc
            )
        start = pod_start(pod, revision, CONTAINER, events, log_text)
        if start is not None:
            out.append(start)
    return tuple(out)


def _workload_window(runs: tuple[Run, ...], now: dt.datetime) -> int:
    """The live workload's window: the last hour, or since the service's last benchmark run
    ended if sooner (its requests are the runner's, not the users'); 0 while a run goes or
    when that leaves under MIN_WORKLOAD_WINDOW_SECONDS."""
    window = WORKLOAD_WINDOW_SECONDS
    for r in runs:
        if r.state == "Running":
            return 0
        end = (r.result or {}).get("finishedAt") or r.created
        with contextlib.suppress(ValueError, TypeError):
            ended = dt.datetime.fromisoformat(str(end).replace("Z", "+00:00"))
            window = min(window, int((now - ended).total_seconds()))
    return window if window >= MIN_WORKLOAD_WINDOW_SECONDS else 0


def _wants_workload(svc: Service, runs: tuple[Run, ...], revision: str) -> bool:
    """An objective that leaves a workload length to the live traffic, and the spec's
    revision has no run yet (its run may start in this reconcile): read once per revision."""
    o = svc.spec.objective
    if o is None or not svc.spec.benchmark.enabled or not revision:
        return False
    if o.input_tokens is not None and o.output_tokens is not None:
        return False
    return not any(r.revision == revision for r in runs)


def _measuring(deployment: dict[str, Any], runs: tuple[Run, ...]) -> bool:
    """A run may start (the Deployment is rolled out: the revision's first run, a re-run, a
    run confirming a failed verdict) or one is going: the pods are needed to choose, or to
    watch, the one pod it measures (decide/target_pod.py). One list of the service's pods."""
    return any(r.state == "Running" for r in runs) or rolled_out(deployment)


def _owned(obj: dict[str, Any], svc: Service) -> bool:
    return any(o.get("uid") == svc.uid for o in obj["metadata"].get("ownerReferences", []))


def _failed_pods(reader: Reader, svc: Service, job: dict[str, Any]) -> list[dict[str, Any]]:
    """A failed Job's pods (their last exit says why), read only once the Job has failed."""
    conditions = job.get("status", {}).get("conditions", [])
    if not any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions):
        return []
    # the service's label first: its pods are in the watch cache (no request)
    selector = f"{SERVICE_LABEL}={svc.name},job-name={job['metadata']['name']}"
    return reader.list_children("v1", "Pod", svc.namespace, selector)


def _jobs(reader: Reader, svc: Service) -> list[dict[str, Any]]:
    selector = f"{SERVICE_LABEL}={svc.name},app.kubernetes.io/component={COMPONENT}"
    return [
        j
        for j in reader.list_children("batch/v1", "Job", svc.namespace, selector)
        if _owned(j, svc)
    ]


def history(reader: Reader, svc: Service) -> list[Run]:
    """The runs, oldest first: each run's ConfigMap (the Job's word: its result) joined with
    its record (the operator's: spec, verdict, a state the operator decided). A ConfigMap the
    Job filled with something invalid (a result that is not JSON, a headline value that is not
    a number, a state outside the CRD's enum) fails the run, with the key and the bad value as
    its message (observe/benchresult.py; never an exception, never a silent skip). A finished run's
    report is read from the summary its record keeps (Run.summary: one to write, the first
    time the run is seen finished), never from its result again."""
    selector = f"{SERVICE_LABEL}={svc.name},app.kubernetes.io/name=vllm-bench"
    items = [
        cm
        for cm in reader.list_children("v1", "ConfigMap", svc.namespace, selector)
        if _owned(cm, svc)
    ]
    component = "app.kubernetes.io/component"
    records = {
        cm["metadata"]["name"]: cm.get("data") or {}
        for cm in items
        if cm["metadata"]["labels"].get(component) == RECORD_COMPONENT
    }
    runs = []
    for cm in items:
        if cm["metadata"]["labels"].get(component) != COMPONENT:
            continue
        record = records.get(record_name(cm["metadata"]["name"]), {})
        created = cm["metadata"].get("creationTimestamp", "")
        summary, pending = read_summary(record.get(SUMMARY_KEY, "")), ""
        if summary is not None:  # summarized once: the result is never read again
            report, created = summary[0], summary[1] or created
        else:
            report = brief(read_job_report(_job_data(reader, cm)))  # validated: input
            if report.state != "Running" or record.get(STATE_KEY):  # final: summarize it
                pending = summarize(report, created)
        result, state, message = report.result, report.state, report.message
        if record.get(STATE_KEY):  # the operator ended this run: its word is final
            state, message = record[STATE_KEY], clip(record.get(MESSAGE_KEY, ""))
            if state not in RUN_STATES:  # the status's enum: never written outside it
                state, message = "Failed", f"the run's record holds state {state!r}; {message}"
        runs.append(
            Run(
                revision=cm["metadata"]["labels"].get(REVISION_LABEL, ""),
                name=cm["metadata"]["name"],
                created=created,
                state=state,
                spec_json=record.get(SPEC_KEY, ""),
                result=result,
                message=message,
                verdict=record.get(VERDICT_KEY),
                verdict_failures=record.get(VERDICT_FAILURES_KEY, ""),
                target=recorded_target(record),
                confirmation=record.get(CONFIRMATION_KEY, ""),
                served_before=record.get(SERVED_BEFORE_KEY, ""),
                spec_hash=record.get(SPEC_HASH_KEY, ""),
                summary=pending,
                live_workload=LiveWorkload.load(record.get(LIVE_WORKLOAD_KEY, "")),
            )
        )
    return sorted(runs, key=lambda r: r.created)


def _job_data(reader: Reader, cm: dict[str, Any]) -> dict[str, Any]:
    """The Job's ConfigMap's data with its result: the watch cache leaves the result out
    (benchresult.trim), so a run with one not yet summarized reads it from the API server,
    once (its summary is written in the same reconcile)."""
    if left_out(cm):
        meta = cm["metadata"]
        cm = reader.get("v1", "ConfigMap", meta["namespace"], meta["name"]) or cm
    return cm.get("data") or {}


def pod_exit(pods: list[dict[str, Any]]) -> str:
    """The newest failed container exit of a Job's pods: its code, reason and message (the
    runner's own words, e.g. argparse's `unrecognized arguments: --URL=...`); "" if none."""
    exits = []
    for pod in pods:
        for cs in pod.get("status", {}).get("containerStatuses", []):
            for state in (cs.get("state") or {}, cs.get("lastState") or {}):
                done = state.get("terminated") or {}
                if done and done.get("exitCode", 0) != 0:
                    exits.append((str(done.get("finishedAt") or ""), pod["metadata"]["name"], done))
    if not exits:
        return ""
    _, name, done = max(exits, key=lambda e: e[0])
    text = f"pod {name} exited with code {done.get('exitCode')} ({done.get('reason') or 'Error'})"
    message = str(done.get("message") or "").strip()
    return f"{text}: {message[-MESSAGE_TAIL:]}" if message else text


def job_state(
    job: dict[str, Any], generation_annotation: str = "", pods: list[dict[str, Any]] | None = None
) -> JobState:
    st = job.get("status", {})
    failed = next(
        (
            c
            for c in st.get("conditions", [])
            if c.get("type") == "Failed" and c.get("status") == "True"
        ),
        None,
    )
    return JobState(
        name=job["metadata"]["name"],
        active=bool(st.get("active")),
        succeeded=bool(st.get("succeeded")),
        failed_reason=failed.get("reason", "Failed") if failed else None,
        failed_message=(
            "; ".join(m for m in (failed.get("message", ""), pod_exit(pods or [])) if m)
            if failed
            else ""
        ),
        revision=(job["metadata"].get("labels") or {}).get(REVISION_LABEL, ""),
        generation=written_generation(job, generation_annotation) if generation_annotation else 0,
    )
