"""Which pod a benchmark run measures (decide/target_pod.py, pure), the Job and record rendered for
it (the runner gets the pod's own URL, the record names the pod), and the plan with it
(targeting.aim): a start waits for a Ready pod, a resumed start keeps its pod, a run whose
pod goes away fails and its Job stops (issue 10, item 7)."""

from __future__ import annotations

from typing import Any

from tests.unit.builders import service
from vllm_bench.cli import build_parser
from vllm_operator.api.records import Run, Target
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.decide.aim import aim
from vllm_operator.decide.policy import Plan, Start, decide
from vllm_operator.decide.target_pod import (
    Choice,
    choose_target,
    revision_pods,
    target_gone,
)
from vllm_operator.observe.state import BenchView, JobState, Observed
from vllm_operator.render.benchmark import (
    REVISION_ANNOTATION,
    TARGET_ANNOTATION,
    recorded_target,
    render_job,
    render_run_record,
    revision,
    run_name,
)
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.status import compute_status
from vllm_operator.write.benchmark_runs import render_start

SETTINGS = OperatorSettings()


def deployment(
    replicas: int = 2, updated: int = 2, generation: int = 3, seen: int = 3
) -> dict[str, Any]:
    return {
        "metadata": {"name": "svc", "generation": generation},
        "status": {"observedGeneration": seen, "replicas": replicas, "updatedReplicas": updated},
    }


def pod(
    name: str,
    created: str,
    *,
    hash_: str = "7c9f",
    ready: bool = True,
    ip: str | None = "10.85.0.7",
    terminating: bool = False,
    owner: str | None = None,
    uid: str | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": uid or f"uid-{name}",
        "creationTimestamp": created,
        "labels": {"pod-template-hash": hash_},
        "ownerReferences": [
            {"kind": "ReplicaSet", "name": owner or f"svc-{hash_}", "controller": True}
        ],
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-11-30T18:00:00Z"
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def test_the_oldest_ready_pod_of_the_revision_is_measured() -> None:
    pods = [
        pod("svc-7c9f-bbbbb", "2026-11-30T17:05:00Z", ip="10.85.0.9"),
        pod("svc-7c9f-aaaaa", "2026-11-30T17:01:00Z", ip="10.85.0.7"),
        pod("svc-7c9f-ccccc", "2026-11-30T17:00:00Z", ip="10.85.0.5", ready=False),
    ]
    choice = choose_target(deployment(replicas=3, updated=3), pods, 8000)
    assert choice.target == Target("svc-7c9f-aaaaa", "uid-svc-7c9f-aaaaa", "10.85.0.7", 8000)
    assert choice.target.url == "http://10.85.0.7:8000"
    # the same choice whatever order the list comes in; a tie on time goes by name
    assert choose_target(deployment(replicas=3, updated=3), pods[::-1], 8000) == choice
    tie = [pod("svc-7c9f-b", "2026-11-30T17:00:00Z"), pod("svc-7c9f-a", "2026-11-30T17:00:00Z")]
    assert choose_target(deployment(), tie, 8000).target.pod == "svc-7c9f-a"  # type: ignore[union-attr]


def test_terminating_pods_of_the_old_revision_are_never_chosen() -> None:
    pods = [
        pod("svc-1111-old", "2026-11-30T16:00:00Z", hash_="1111", terminating=True),
        pod("svc-7c9f-new", "2026-11-30T17:00:00Z", ip="10.85.0.8"),
    ]
    got = choose_target(deployment(replicas=1, updated=1), pods, 8000).target
    assert got is not None
    assert got.pod == "svc-7c9f-new"
    # a terminating pod of the new revision either (it is on its way out: a scale-in)
    assert choose_target(deployment(replicas=1, updated=1), [pods[0]], 8000).target is None


def test_finished_pods_of_an_older_replicaset_do_not_block_the_choice() -> None:
    """Issue 19, item 7: an evicted pod (or one whose node shut down) of an older ReplicaSet
    stays in the API, phase Failed, until the pod garbage collector removes it; the
    Deployment controller no longer counts it, and neither does the choice of a pod."""
    new = pod("svc-7c9f-new", "2026-11-30T17:00:00Z", ip="10.85.0.8")
    for phase in ("Failed", "Succeeded"):
        old = pod("svc-1111-old", "2026-11-30T16:00:00Z", hash_="1111", phase=phase, ip=None)
        got = choose_target(deployment(replicas=1, updated=1), [old, new], 8000)
        assert got == Choice(Target("svc-7c9f-new", "uid-svc-7c9f-new", "10.85.0.8", 8000))
        # a failed pod of the current ReplicaSet is never chosen either (its replacement is)
        evicted = pod("svc-7c9f-evicted", "2026-11-30T16:30:00Z", phase=phase)
        assert choose_target(deployment(replicas=1, updated=1), [evicted, new], 8000) == got


def test_nothing_is_chosen_while_a_rollout_is_under_way() -> None:
    pods = [pod("svc-7c9f-a", "2026-11-30T17:00:00Z")]
    for dep, why in [
        (None, "does not exist"),
        (deployment(seen=2), "has not seen the current pod template"),
        (deployment(updated=1), "1 of 2 pods updated"),
    ]:
        choice = choose_target(dep, pods, 8000)
        assert choice.target is None
        assert why in choice.reason
    # a read of the pods newer than the Deployment's: pods of two ReplicaSets
    mixed = [*pods, pod("svc-2222-b", "2026-11-30T17:10:00Z", hash_="2222")]
    choice = choose_target(deployment(), mixed, 8000)
    assert (choice.target, "more than one ReplicaSet" in choice.reason) == (None, True)


def test_only_pods_of_the_deployments_replicaset_that_are_ready_with_an_ip_count() -> None:
    stranger = pod("other-7c9f-a", "2026-11-30T16:00:00Z", owner="other-7c9f")
    assert revision_pods(deployment(), [stranger]) == ([], "no pod of the current revision exists")
    for unready in (pod("svc-7c9f-a", "t", ready=False), pod("svc-7c9f-a", "t", ip=None)):
        choice = choose_target(deployment(), [unready], 8000)
        assert (choice.target, choice.reason) == (None, "no pod of the current revision is Ready")


def test_ipv6_pod_urls_are_bracketed() -> None:
    assert Target("p", "u", "fd00::7", 8000).url == "http://[fd00::7]:8000"


def test_a_measured_pod_that_goes_away_is_gone_and_an_unready_one_is_not() -> None:
    target = Target("svc-7c9f-a", "uid-svc-7c9f-a", "10.85.0.7", 8000)
    live = pod("svc-7c9f-a", "t")
    assert target_gone(target, live) is None
    assert target_gone(target, pod("svc-7c9f-a", "t", ready=False)) is None
    assert target_gone(target, None) == (
        "the measured pod svc-7c9f-a (10.85.0.7) was deleted during the run"
    )
    assert "began terminating" in str(target_gone(target, pod("svc-7c9f-a", "t", terminating=True)))
    assert "replaced" in str(target_gone(target, pod("svc-7c9f-a", "t", uid="other")))


def test_the_job_measures_the_pod_and_the_record_names_it() -> None:
    svc = service("tiny-cpu")
    target = Target("tiny-cpu-7c9f-a", "uid-a", "10.85.0.7", 8000)
    job = render_job(svc, SETTINGS, "aaaaaaaaaa", target)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    runner = build_parser().parse_args(args[args.index("--") + 1 :])
    assert runner.url == "http://10.85.0.7:8000"
    assert job["metadata"]["annotations"] == {
        TARGET_ANNOTATION: "tiny-cpu-7c9f-a http://10.85.0.7:8000"
    }
    record = render_run_record(svc, "aaaaaaaaaa", target)
    assert record["data"]["targetPod"] == "tiny-cpu-7c9f-a"
    assert record["data"]["targetPodIP"] == "10.85.0.7"
    assert recorded_target(record["data"]) == target
    # without a target (no pod chosen), the Service as before; a record without one
    untargeted = render_job(svc, SETTINGS, "aaaaaaaaaa")
    assert "annotations" not in untargeted["metadata"]
    args = untargeted["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "http://tiny-cpu.ns.svc" in args[args.index("--url") + 1]
    assert recorded_target(render_run_record(svc, "aaaaaaaaaa")["data"]) is None
    assert recorded_target({"targetPod": "p", "targetPodIP": "1.2.3.4", "targetPort": "x"}) is None


# ---- targeting.aim: the pod in the plan ----------------------------------------------------

SVC = service("minimal")
REV = revision(render_pod_template(SVC, SETTINGS))
RUN = run_name(SVC, REV)


def rolled_out(replicas: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": "minimal", "generation": 2, "annotations": {REVISION_ANNOTATION: REV}},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": 2,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
        },
    }


def server_pod(name: str, created: str, ip: str, *, ready: bool = True) -> dict[str, Any]:
    return pod(name, created, ip=ip, owner="minimal-7c9f", ready=ready)


PODS = (
    server_pod("minimal-7c9f-b", "2026-11-30T17:02:00Z", "10.85.0.9"),
    server_pod("minimal-7c9f-a", "2026-11-30T17:01:00Z", "10.85.0.7"),
)
OLDEST = Target("minimal-7c9f-a", "uid-minimal-7c9f-a", "10.85.0.7", 8000)


def planned(observed: Observed) -> Plan:
    return aim(SVC, observed, decide(SVC, observed, SETTINGS))


def running(target: Target | None = OLDEST) -> Run:
    return Run(REV, RUN, "2030-01-01T00:00:00Z", "Running", "", target=target)


def test_a_run_starts_on_the_oldest_ready_pod_and_waits_while_there_is_none() -> None:
    plan = planned(Observed(deployment=rolled_out(), pods=PODS))
    assert plan.start == Start(RUN, REV, target=OLDEST)
    unready = tuple(server_pod(p["metadata"]["name"], "t", "10.85.0.1", ready=False) for p in PODS)
    assert planned(Observed(deployment=rolled_out(), pods=unready)).start is None
    # no pods read: the Service, as before runs targeted a pod
    assert planned(Observed(deployment=rolled_out())).start == Start(RUN, REV)
    # an evicted pod of an older ReplicaSet, left in the API, does not hold the run back
    evicted = pod("minimal-1111-old", "2026-11-30T16:00:00Z", hash_="1111", phase="Failed")
    got = planned(Observed(deployment=rolled_out(), pods=(evicted, *PODS))).start
    assert got == Start(RUN, REV, target=OLDEST)


def test_the_rendered_start_measures_the_chosen_pod() -> None:
    start = planned(Observed(deployment=rolled_out(), pods=PODS)).start
    assert start is not None
    record, _, _, _, _, job = render_start(SVC, SETTINGS, start)
    assert record["data"]["targetPod"] == "minimal-7c9f-a"
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--url") + 1] == "http://10.85.0.7:8000"


def test_a_run_whose_pod_goes_away_fails_and_its_job_stops() -> None:
    active = JobState(RUN, active=True, succeeded=False, failed_reason=None)
    there = Observed(deployment=rolled_out(), runs=(running(),), jobs=(active,), pods=PODS)
    assert planned(there).stop == ()
    assert planned(there).record == ()
    left = (PODS[0],)  # the measured pod was deleted
    plan = planned(Observed(deployment=rolled_out(), runs=(running(),), jobs=(active,), pods=left))
    assert plan.stop == (RUN,)
    (record,) = plan.record
    assert record.unless_result
    assert record.data["state"] == "Failed"
    assert record.data["message"] == (
        "TargetPodGone: the measured pod minimal-7c9f-a (10.85.0.7) was deleted during the "
        "run; the rerun-benchmark annotation measures the revision again"
    )
    # an unread pod list proves nothing: no failure
    unread = Observed(deployment=rolled_out(), runs=(running(),), jobs=(active,))
    assert planned(unread).record == ()


def test_a_resumed_start_measures_the_recorded_pod_or_ends_when_it_is_gone() -> None:
    # an operator restart between the ConfigMaps and the Job: no Job yet
    newer = (server_pod("minimal-7c9f-c", "2026-11-30T16:00:00Z", "10.85.0.3"), *PODS)
    plan = planned(Observed(deployment=rolled_out(3), runs=(running(),), pods=newer))
    assert plan.start == Start(RUN, REV, resume=True, target=OLDEST)
    plan = planned(Observed(deployment=rolled_out(), runs=(running(),), pods=(PODS[0],)))
    assert plan.start is None
    assert [r.data["state"] for r in plan.record] == ["Failed"]


def test_the_status_names_the_measured_pod_and_the_load_of_others_on_it() -> None:
    live = {"foreignRequests": 7, "peakForeignInFlight": 2.0, "quiet": False, "ownRequests": 40}
    result = {"status": "ok", "headline": {"outputTokensPerSecond": 9.5}, "liveLoad": live}
    done = Run(REV, RUN, "2030-01-01T00:00:00Z", "Complete", "", result=result, target=OLDEST)
    bench = BenchView(revision=REV, run_name=RUN, runs=(done,), rollout_done=True)
    st = compute_status(
        SVC, Observed(rolled_out()), {}, SETTINGS, "2030-01-01T00:10:00Z", bench=bench
    )
    assert st["benchmark"]["targetPod"] == "minimal-7c9f-a"
    assert st["benchmark"]["targetPodIP"] == "10.85.0.7"
    assert st["benchmark"]["liveLoad"] == {
        "foreignRequests": 7,
        "peakForeignInFlight": 2.0,
        "quiet": False,
    }
    # a run of an earlier runner (no liveLoad) and without a recorded pod: neither key
    old = Run(REV, RUN, "2030-01-01T00:00:00Z", "Complete", "", result={"status": "ok"})
    bench = BenchView(revision=REV, run_name=RUN, runs=(old,), rollout_done=True)
    st = compute_status(
        SVC, Observed(rolled_out()), {}, SETTINGS, "2030-01-01T00:10:00Z", bench=bench
    )
    assert not {"targetPod", "targetPodIP", "liveLoad"} & st["benchmark"].keys()
