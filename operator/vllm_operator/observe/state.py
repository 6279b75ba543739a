"""What observe() gathers: small frozen dataclasses, and the pure reading of pod states.
Kept apart from observe/read.py so that vllm_operator.status (pure) can use them without the
client."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from vllm_operator import GROUP
from vllm_operator.api.records import LiveWorkload, Run
from vllm_operator.api.spec import Service
from vllm_operator.observe.startup import PodStart
from vllm_operator.render.benchmark import PREVIOUS_REVISION_ANNOTATION, REVISION_ANNOTATION

# On the serving Deployment: the spec its pod template was rendered from (reconcile writes it)
SERVED_SPEC_ANNOTATION = f"{GROUP}/served-spec"

# container waiting reasons that mean the replica will not come up without a change
BAD_WAITING = (
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
)


@dataclass(frozen=True)
class PodProblem:
    pod: str
    reason: str
    message: str


@dataclass(frozen=True)
class JobState:
    name: str
    active: bool
    succeeded: bool
    failed_reason: str | None  # DeadlineExceeded, BackoffLimitExceeded, ...
    failed_message: str = ""
    revision: str = ""
    generation: int = 0  # the service generation that started it (0: not recorded)


@dataclass(frozen=True)
class LiveFigures:
    """A set of pods' live traffic over a window, as Prometheus recorded it (observe/live.py).
    None: no sample (no request of the kind in the window)."""

    requests: float  # requests finished (vllm:e2e_request_latency_seconds_count)
    http_requests: float  # /v1 responses, and of them 5xx
    http_errors: float
    ttft_p99: float | None
    itl_p99: float | None
    # the lower bound of the histogram bucket that holds each p99 (the p99 lies between it and
    # the bucket's upper bound; the estimate interpolates); None: not known (any value)
    ttft_p99_floor: float | None = None
    itl_p99_floor: float | None = None

    @property
    def error_rate(self) -> float:
        return self.http_errors / self.http_requests if self.http_requests else 0.0


@dataclass(frozen=True)
class Bake:
    """The canary's bake on live traffic (rollout.canary.bake): it joined the Service's
    endpoints at `started` (status.rollout.bake.startedAt, which the reconcile that created
    its EndpointSlice recorded), `elapsed` seconds ago."""

    started: str  # when the operator put it in the endpoints, on the operator's own clock
    elapsed: float  # the operator's clock since `started` (one clock: never the API server's)
    canary: LiveFigures | None = None
    stable: LiveFigures | None = None
    error: str = ""  # why the figures could not be read ("": read)
    # the seconds the figures cover (at least the reader's shortest window): more than
    # `elapsed` while the bake is younger than that, the figures then reach back before it
    window: float = 0.0
    # the same figures over the most recent half of the bake, once that half is at least the
    # shortest window (None before): an abort needs both looks worse (a spike that is over,
    # the canary's first seconds, is in the whole window only)
    recent_canary: LiveFigures | None = None
    recent_stable: LiveFigures | None = None
    # what happened to the canary's pod in the bake ("": it serves as when the bake began):
    # gone, replaced, not Ready, a container restarted (decide/bake.py: the bake fails)
    pod_problem: str = ""


@dataclass(frozen=True)
class ZeroObserved:
    """What scale to zero reads (observe/read.py _zero)."""

    services: tuple[Service, ...] = ()
    holder_pods: tuple[tuple[str, str, str], ...] = ()
    idle: bool | None = None


@dataclass(frozen=True)
class Observed:
    """Everything one reconcile reads, before it writes anything."""

    deployment: dict[str, Any] | None
    hpa: dict[str, Any] | None = None
    pod_problems: tuple[PodProblem, ...] = field(default_factory=tuple)
    # pods the scheduler could not place yet, within UNSCHEDULABLE_GRACE of their creation:
    # a rollout in progress (maxSurge 0 on a full node waits for the old pod), not Degraded
    pods_waiting: tuple[PodProblem, ...] = field(default_factory=tuple)
    # the Prometheus Operator's CRDs are served (its objects can be applied)
    monitoring_crds: bool = False
    # the benchmark history (oldest first) and the runs' Jobs, when enabled
    runs: tuple[Run, ...] = ()
    jobs: tuple[JobState, ...] = ()
    # the service generation whose rendering last wrote the Deployment (0: not recorded)
    written_generation: int = 0
    # the service's pods, read while a benchmark run may start or is going (the one pod a
    # run measures: decide/target_pod.py); None: not read
    pods: tuple[dict[str, Any], ...] | None = None
    # the canary Deployment (render/canary.py) and its pods, read while one may be wanted
    # (rollout.canary with gates); its pods' problems and waits as for the serving pods
    canary: dict[str, Any] | None = None
    canary_pods: tuple[dict[str, Any], ...] | None = None
    canary_problems: tuple[PodProblem, ...] = field(default_factory=tuple)
    canary_waiting: tuple[PodProblem, ...] = field(default_factory=tuple)
    # the canary's bake on live traffic, while its EndpointSlice exists (None: not baking)
    bake: Bake | None = None
    # status.rollout as the operator last wrote it (its own record: a bake that began, its
    # verdict, outlive the children that carry them, which anyone can delete)
    recorded_rollout: dict[str, Any] = field(default_factory=dict)
    # the live traffic shape, read where a revision's run with an objective that names no
    # workload may start (observe/live.py workload); None: not read, or too little traffic
    live_workload: LiveWorkload | None = None
    # the starts of pods first seen Ready in this look (observe/startup.py): status.startup
    starts: tuple[PodStart, ...] = ()
    # when this was read, on the operator's clock (as the status writes times): a bake that
    # begins now is recorded as beginning then, and its elapsed time is read on the same clock
    observed_at: str = ""
    # scale to zero (autoscaling.minReplicas 0; None: not read): the namespace's VLLMServices
    # (what its holder is rendered from), the holder's Ready pods that hold this namespace's
    # current set of services (name, uid, IP), and whether the service had no request for
    # its idleSeconds (None: not known)
    zero: ZeroObserved | None = None

    @property
    def waits_for_room(self) -> bool:
        """A serving pod has waited to be scheduled for want of room beyond its grace
        (UNSCHEDULABLE_GRACE): within it, a terminating pod (a canary scaled to 0, an old
        pod's drain) may still free the room."""
        return any(p.reason == "Unschedulable" and _no_room(p.message) for p in self.pod_problems)

    @property
    def served_spec(self) -> str:
        """The spec (JSON) the live Deployment's pod template was rendered from ("": not
        recorded: a Deployment of an earlier operator): what a canary in progress holds the
        serving pods at."""
        annotations = (self.deployment or {}).get("metadata", {}).get("annotations") or {}
        return str(annotations.get(SERVED_SPEC_ANNOTATION, ""))

    @property
    def canary_revision(self) -> str:
        """The revision the canary Deployment runs ("": none)."""
        annotations = (self.canary or {}).get("metadata", {}).get("annotations") or {}
        return str(annotations.get(REVISION_ANNOTATION, ""))

    @property
    def deployment_revision(self) -> str:
        """The pod-template revision the live Deployment was last applied with ("": not
        recorded; reconcile.with_revision writes it)."""
        annotations = (self.deployment or {}).get("metadata", {}).get("annotations") or {}
        return str(annotations.get(REVISION_ANNOTATION, ""))

    @property
    def previous_revision(self) -> str:
        """The revision rolled out before the live Deployment's ("": not known)."""
        annotations = (self.deployment or {}).get("metadata", {}).get("annotations") or {}
        return str(annotations.get(PREVIOUS_REVISION_ANNOTATION, ""))


def previous_revision(live: dict[str, Any] | None, rev: str) -> str:
    """The revision that served before `rev`, for the Deployment that is to run `rev` (its
    annotation; "": not known): the live Deployment's revision when that is another one and
    its rollout finished (a rollout that never finished served nothing), else what the live
    Deployment says already. So a revert shows: after A, B, A again, C's predecessor is A, not
    B; and a resync writes nothing new."""
    annotations = ((live or {}).get("metadata") or {}).get("annotations") or {}
    current = str(annotations.get(REVISION_ANNOTATION, ""))
    if live is not None and current and current != rev and rolled_out(live):
        return current
    before = str(annotations.get(PREVIOUS_REVISION_ANNOTATION, ""))
    return before if before != rev else ""


def written_generation(obj: dict[str, Any] | None, key: str) -> int:
    """The service generation whose rendering last wrote `obj` (0: none recorded)."""
    value = ((obj or {}).get("metadata", {}).get("annotations") or {}).get(key, "")
    return int(value) if str(value).isdigit() else 0


def rolled_out(deployment: dict[str, Any]) -> bool:
    """The Deployment controller has seen the latest spec and every wanted replica is of
    the new template and available, with no old pod left."""
    st = deployment.get("status", {})
    want = deployment.get("spec", {}).get("replicas", 1)
    seen = st.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
    return bool(
        seen
        and st.get("updatedReplicas", 0) >= want
        and st.get("replicas", 0) <= want
        and st.get("availableReplicas", 0) >= want
    )


# an unschedulable pod is a rollout in progress for this long after its creation, beyond the
# longest termination grace period of the service's pods: with maxSurge 0 on a full node the
# new pod waits for the old one to stop, and the scheduler retries it only afterwards (its
# PodScheduled=False stays until then)
UNSCHEDULABLE_GRACE = 60.0
# a termination message quoted in the status at most this long (its end: the error)
MESSAGE_TAIL = 400


def _age(pod: dict[str, Any], now: dt.datetime) -> float | None:
    created = pod.get("metadata", {}).get("creationTimestamp")
    if not created:
        return None
    try:
        stamp = dt.datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (now - stamp).total_seconds()


def _no_room(message: str) -> bool:
    """The scheduler's message says only resources are short on the nodes that would take
    the pod ("0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint"
    counts: the tainted ones are not candidates), and no node fits for want of room."""
    return "Insufficient " in message or "Too many pods" in message


def _crashed(cs: dict[str, Any]) -> PodProblem | None:
    """A container that is not ready and whose last run ended in failure: a crash loop,
    also while the kubelet has just restarted it (state running, not ready yet), with the
    last exit's code, reason and message (the end of the log: FallbackToLogsOnError)."""
    last = (cs.get("lastState") or {}).get("terminated") or {}
    if cs.get("ready") or not last or last.get("exitCode", 0) == 0:
        return None
    waiting = (cs.get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason") if waiting.get("reason") in BAD_WAITING else "CrashLoopBackOff"
    restarts = int(cs.get("restartCount") or 0)
    message = f"container {cs.get('name')} exited with code {last.get('exitCode')}"
    message += f" ({last.get('reason') or 'Error'}), restarted {restarts} times"
    tail = str(last.get("message") or "").strip()
    if tail:
        message += ": " + cause(tail)
    return PodProblem("", str(reason), message)


# the line of a Python traceback that names what was raised: `ValueError: ...`, also behind a
# log prefix (vLLM's `(EngineCore_DP0 pid=81) ERROR 12-04 10:00:00 [core.py:708] ...`)
_RAISED = re.compile(r"\b((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt))(?::\s|$)")


def cause(log_tail: str) -> str:
    """What a crashed container's log end says of its cause, at most MESSAGE_TAIL characters:
    the last line that names a raised exception, from the exception's name to the line's end
    (vLLM's engine start-up failures end with that line, then shutdown noise; a wrapper that
    says "see root cause above" is passed over for the exception before it); without one,
    the end of the log cut at a line's start (never from mid-sentence)."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    raised = [line[m.start(1) :] for line in lines if (m := _RAISED.search(line))]
    # a wrapper that points back at the cause (vLLM's "Engine core initialization failed. See
    # root cause above."): the exception before it is the cause
    causes = [r for r in raised if "root cause above" not in r] or raised
    if causes:
        said = causes[-1]
        return said if len(said) <= MESSAGE_TAIL else said[: MESSAGE_TAIL - 3] + "..."
    out: list[str] = []
    for line in reversed(lines):
        if sum(len(x) + 1 for x in out) + len(line) > MESSAGE_TAIL:
            break
        out.insert(0, line)
    return " / ".join(out) if out else log_tail[-MESSAGE_TAIL:]


def pod_problems(
    pods: list[dict[str, Any]], now: dt.datetime | None = None
) -> tuple[tuple[PodProblem, ...], tuple[PodProblem, ...]]:
    """(problems, waiting): what keeps the service's pods from coming up without a change,
    and the pods the scheduler has not placed yet within their grace (see
    UNSCHEDULABLE_GRACE); `now`: the time the pods were read."""
    now = now or dt.datetime.now(dt.UTC)
    grace = UNSCHEDULABLE_GRACE + max(
        (int(p.get("spec", {}).get("terminationGracePeriodSeconds") or 30) for p in pods),
        default=30,
    )
    problems: list[PodProblem] = []
    waiting: list[PodProblem] = []
    for pod in pods:
        name = pod["metadata"]["name"]
        status = pod.get("status", {})
        if status.get("phase") in ("Failed", "Succeeded"):
            continue  # a finished pod (evicted, its node gone) is replaced, not in the way
        for cond in status.get("conditions", []):
            if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                message = str(cond.get("message", ""))
                problem = PodProblem(name, "Unschedulable", message)
                age = _age(pod, now)
                # only a lack of room can free up (a stopping pod, a scale-down elsewhere):
                # no node matching the selector, or an untolerated taint, is Degraded at once
                in_grace = age is not None and age < grace and _no_room(message)
                (waiting if in_grace else problems).append(problem)
        for cs in status.get("containerStatuses", []):
            crashed = _crashed(cs)
            if crashed is not None:
                problems.append(PodProblem(name, crashed.reason, crashed.message))
                continue
            state_waiting = cs.get("state", {}).get("waiting") or {}
            if state_waiting.get("reason") in BAD_WAITING:
                problems.append(
                    PodProblem(name, state_waiting["reason"], state_waiting.get("message", ""))
                )
    return tuple(problems), tuple(waiting)


@dataclass(frozen=True)
class BenchView:
    """What the status needs to know about benchmarking (from policy.Plan)."""

    revision: str  # the revision the spec asks for
    run_name: str = ""  # its current run (the rerun annotation picks a new one); "": any
    runs: tuple[Run, ...] = ()  # oldest first
    failures: tuple[str, ...] | None = None  # None: no verdict (no thresholds or no result)
    rolled_back_to: str | None = None
    # the run failed and a rollback was due, but its target's record is unusable: why
    rollback_refused: str | None = None
    rollout_done: bool = False
    gated: bool = False  # the spec sets thresholds (the spec's, not a rolled-back one's)
    # the revision's run failed its gates and run_name confirms it: why (no rollback yet)
    confirming: str | None = None
    confirmed: bool = False  # a rollback in force follows two failed runs
    # this operator renders pod templates differently from the one that measured them: the
    # spec's revision now (`revision`: as measured), the rollback target's (what runs)
    rendered_as: str = ""
    restored_as: str = ""
