"""compute_status and invalid_spec_status: pure functions of the service, what was observed,
the old status and the time."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.unit.builders import service
from vllm_operator.api.records import Run
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.observe.read import job_state
from vllm_operator.observe.state import (
    MESSAGE_TAIL,
    BenchView,
    Observed,
    PodProblem,
    cause,
    pod_problems,
)
from vllm_operator.status import compute_status
from vllm_operator.status.failures import apply_failed_status, invalid_spec_status

SETTINGS = OperatorSettings(cluster_domain="cluster.local")
T0 = "2030-01-01T00:00:00Z"
T1 = "2030-01-01T00:05:00Z"
T2 = "2030-01-01T00:10:00Z"
GEN = 4
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
SELECTOR = "app.kubernetes.io/instance=minimal,app.kubernetes.io/name=vllm"
ENDPOINT = "http://minimal.ns.svc.cluster.local:8000/v1"


def deployment(
    want: int = 2,
    *,
    total: int | None = None,
    updated: int | None = None,
    ready: int | None = None,
    available: int | None = None,
    generation: int = 7,
    observed: int | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A live Deployment; counts default to a finished rollout of `want` replicas."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "minimal", "namespace": "ns", "generation": generation},
        "spec": {"replicas": want},
        "status": {
            "observedGeneration": generation if observed is None else observed,
            "replicas": want if total is None else total,
            "updatedReplicas": want if updated is None else updated,
            "readyReplicas": want if ready is None else ready,
            "availableReplicas": want if available is None else available,
            "conditions": conditions or [],
        },
    }


def status(obs: Observed, old: dict[str, Any] | None = None, now: str = T1) -> dict[str, Any]:
    return compute_status(service("minimal", generation=GEN), obs, old or {}, SETTINGS, now)


def cond(st: dict[str, Any], kind: str) -> dict[str, Any]:
    (only,) = [c for c in st["conditions"] if c["type"] == kind]
    return only


def brief(st: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in st["conditions"]}


def c(kind: str, status_: str, reason: str, message: str = "", when: str = T0) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status_,
        "reason": reason,
        "message": message,
        "lastTransitionTime": when,
        "observedGeneration": GEN - 1,
    }


def test_no_deployment() -> None:
    st = status(Observed(deployment=None))
    assert st == {
        "observedGeneration": GEN,
        "selector": SELECTOR,
        "endpoint": ENDPOINT,
        "model": MODEL,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "DeploymentMissing",
                "message": "the Deployment is being created",
                "lastTransitionTime": T1,
                "observedGeneration": GEN,
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "Creating",
                "message": "creating the Deployment",
                "lastTransitionTime": T1,
                "observedGeneration": GEN,
            },
            {
                "type": "Degraded",
                "status": "False",
                "reason": "AsExpected",
                "message": "",
                "lastTransitionTime": T1,
                "observedGeneration": GEN,
            },
        ],
    }


def test_rolled_out() -> None:
    st = status(Observed(deployment=deployment(2)))
    assert st == {
        "observedGeneration": GEN,
        "replicas": 2,
        "desiredReplicas": 2,
        "readyReplicas": 2,
        "updatedReplicas": 2,
        "availableReplicas": 2,
        "selector": SELECTOR,
        "endpoint": ENDPOINT,
        "model": MODEL,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Available",
                "message": f"2/2 replicas serve {MODEL}",
                "lastTransitionTime": T1,
                "observedGeneration": GEN,
            },
            {
                "type": "Progressing",
                "status": "False",
                "reason": "RolloutComplete",
                "message": "the rollout is complete",
                "lastTransitionTime": T1,
                "observedGeneration": GEN,
            },
            {
                "type": "Degraded",
                "status": "False",
                "reason": "AsExpected",
                "message": "",
                "lastTransitionTime": T1,
                "observedGeneration": GEN,
            },
        ],
    }


def test_rollout_in_progress() -> None:
    dep = deployment(3, total=3, updated=1, ready=2, available=2)
    st = status(Observed(deployment=dep))
    assert brief(st) == {
        "Ready": ("False", "RolloutInProgress", "1/3 replicas updated, 2 available"),
        "Progressing": (
            "True",
            "RollingOut",
            f"rolling out generation {GEN}: 1/3 updated, 2 ready",
        ),
        "Degraded": ("False", "AsExpected", ""),
    }
    assert (st["replicas"], st["updatedReplicas"], st["readyReplicas"]) == (3, 1, 2)


@pytest.mark.parametrize(
    "dep",
    [
        deployment(2, observed=6),  # the controller has not seen the latest generation
        deployment(2, total=3),  # an old pod is still around (surge)
        deployment(2, available=1),
        deployment(2, updated=1),
    ],
    ids=["stale-generation", "extra-old-pod", "unavailable", "not-updated"],
)
def test_not_rolled_out_until_everything_matches(dep: dict[str, Any]) -> None:
    st = status(Observed(deployment=dep))
    assert cond(st, "Ready")["status"] == "False"
    assert cond(st, "Ready")["reason"] == "RolloutInProgress"
    assert cond(st, "Progressing")["status"] == "True"


def test_a_fresh_deployment_without_status() -> None:
    dep = deployment(1)
    del dep["status"]
    st = status(Observed(deployment=dep))
    assert brief(st)["Ready"] == ("False", "RolloutInProgress", "0/1 replicas updated, 0 available")
    assert (st["readyReplicas"], st["updatedReplicas"], st["availableReplicas"]) == (0, 0, 0)


def test_progress_deadline_exceeded() -> None:
    deadline = {
        "type": "Progressing",
        "status": "False",
        "reason": "ProgressDeadlineExceeded",
        "message": 'ReplicaSet "minimal-5d8f" has timed out progressing.',
    }
    dep = deployment(2, updated=1, ready=1, available=1, conditions=[deadline])
    assert brief(status(Observed(deployment=dep))) == {
        "Ready": ("False", "RolloutInProgress", "1/2 replicas updated, 1 available"),
        "Progressing": (
            "False",
            "ProgressDeadlineExceeded",
            'ReplicaSet "minimal-5d8f" has timed out progressing.',
        ),
        "Degraded": (
            "True",
            "ProgressDeadlineExceeded",
            "the rollout did not finish within the progress deadline",
        ),
    }


def test_pod_problem_degrades() -> None:
    dep = deployment(2, ready=1, available=1)
    problem = PodProblem(
        "minimal-5d8f-abcde", "Unschedulable", "0/3 nodes are available: 3 Insufficient gpu."
    )
    st = status(Observed(deployment=dep, pod_problems=(problem,)))
    assert cond(st, "Degraded")["status"] == "True"
    assert cond(st, "Degraded")["reason"] == "Unschedulable"
    assert cond(st, "Degraded")["message"] == (
        "pod minimal-5d8f-abcde: 0/3 nodes are available: 3 Insufficient gpu."
    )
    assert cond(st, "Ready")["status"] == "False"


def test_several_pod_problems_name_the_first_and_count_the_rest() -> None:
    problems = (
        PodProblem("p1", "CrashLoopBackOff", "back-off 5m0s restarting failed container"),
        PodProblem("p2", "Unschedulable", ""),
        PodProblem("p3", "ImagePullBackOff", ""),
    )
    dep = deployment(3, ready=0, available=0)
    st = status(Observed(deployment=dep, pod_problems=problems))
    assert brief(st)["Degraded"] == (
        "True",
        "CrashLoopBackOff",
        "pod p1: back-off 5m0s restarting failed container (and 2 more)",
    )


def test_pod_problem_wins_over_the_deadline_for_degraded() -> None:
    deadline = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
    dep = deployment(2, ready=1, available=1, conditions=[deadline])
    problem = PodProblem("p1", "Unschedulable", "no GPU")
    st = status(Observed(deployment=dep, pod_problems=(problem,)))
    assert brief(st)["Degraded"] == ("True", "Unschedulable", "pod p1: no GPU")
    assert brief(st)["Progressing"] == ("False", "ProgressDeadlineExceeded", "")


def test_scaled_to_zero() -> None:
    st = status(Observed(deployment=deployment(0)))
    assert brief(st) == {
        "Ready": ("False", "ScaledToZero", "replicas is 0; scale up to serve"),
        "Progressing": ("False", "RolloutComplete", "the rollout is complete"),
        "Degraded": ("False", "AsExpected", ""),
    }
    assert st["replicas"] == 0


def test_observed_generation_everywhere() -> None:
    st = status(Observed(deployment=deployment(2)))
    assert st["observedGeneration"] == GEN
    assert [x["observedGeneration"] for x in st["conditions"]] == [GEN, GEN, GEN]


def test_last_transition_time_kept_when_status_unchanged() -> None:
    old = status(Observed(deployment=None), now=T0)
    assert {x["lastTransitionTime"] for x in old["conditions"]} == {T0}

    # Ready False -> False (reason changes), Progressing True -> True, Degraded False -> False
    rolling = status(Observed(deployment=deployment(2, updated=1)), old, now=T1)
    assert brief(rolling)["Ready"][:2] == ("False", "RolloutInProgress")
    assert {x["lastTransitionTime"] for x in rolling["conditions"]} == {T0}

    # Ready False -> True, Progressing True -> False, Degraded False -> False
    done = status(Observed(deployment=deployment(2)), rolling, now=T2)
    assert cond(done, "Ready")["lastTransitionTime"] == T2
    assert cond(done, "Progressing")["lastTransitionTime"] == T2
    assert cond(done, "Degraded")["lastTransitionTime"] == T0

    # nothing changes: the status is identical, so nothing is written
    assert status(Observed(deployment=deployment(2)), done, now="2031-01-01T00:00:00Z") == done


def test_last_transition_time_from_foreign_old_conditions() -> None:
    old = {
        "conditions": [
            c("Ready", "True", "Available"),
            {"type": "Degraded", "status": "False", "reason": "AsExpected"},  # no time
            c("SomethingElse", "True", "Whatever"),
        ]
    }
    st = status(Observed(deployment=deployment(2)), old, now=T1)
    assert cond(st, "Ready")["lastTransitionTime"] == T0
    assert cond(st, "Progressing")["lastTransitionTime"] == T1  # new condition
    assert cond(st, "Degraded")["lastTransitionTime"] == T1  # kept status, but no time to keep
    assert [x["type"] for x in st["conditions"]] == ["Ready", "Progressing", "Degraded"]


def test_counts_disappear_when_the_deployment_does() -> None:
    st = status(Observed(deployment=None), status(Observed(deployment=deployment(2))))
    assert "replicas" not in st
    assert "readyReplicas" not in st


def test_invalid_spec_keeps_the_rest_of_the_status() -> None:
    old = {
        "observedGeneration": 3,
        "replicas": 2,
        "readyReplicas": 2,
        "endpoint": ENDPOINT,
        "model": MODEL,
        "conditions": [
            c("Ready", "True", "Available", "2/2"),
            c("Progressing", "False", "RolloutComplete"),
            c("Degraded", "False", "AsExpected"),
        ],
    }
    st = invalid_spec_status(old, 4, "spec.port: too small", T1)
    assert st == {
        "observedGeneration": 4,
        "replicas": 2,
        "readyReplicas": 2,
        "endpoint": ENDPOINT,
        "model": MODEL,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "InvalidSpec",
                "message": "spec.port: too small",
                "lastTransitionTime": T1,
                "observedGeneration": 4,
            },
            {
                "type": "Progressing",
                "status": "False",
                "reason": "InvalidSpec",
                "message": "fix the spec; nothing was applied",
                "lastTransitionTime": T0,  # was False already
                "observedGeneration": 4,
            },
            {
                "type": "Degraded",
                "status": "True",
                "reason": "InvalidSpec",
                "message": "spec.port: too small",
                "lastTransitionTime": T1,
                "observedGeneration": 4,
            },
        ],
    }
    assert old["observedGeneration"] == 3  # the input is not modified
    # a second pass with the same error changes nothing (no status write)
    assert invalid_spec_status(st, 4, "spec.port: too small", T2) == st


def test_invalid_spec_on_an_empty_status() -> None:
    st = invalid_spec_status({}, 1, "bad", T0)
    assert st["observedGeneration"] == 1
    assert [(x["type"], x["status"]) for x in st["conditions"]] == [
        ("Ready", "False"),
        ("Progressing", "False"),
        ("Degraded", "True"),
    ]


def test_pod_problems_from_pods() -> None:
    pods = [
        {
            "metadata": {"name": "a"},
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/1 nodes",
                    }
                ]
            },
        },
        {
            "metadata": {"name": "b"},
            "status": {
                "containerStatuses": [
                    {"state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}},
                    {"state": {"waiting": {"reason": "ContainerCreating"}}},
                    {"state": {"running": {}}},
                ]
            },
        },
        {"metadata": {"name": "c"}},
    ]
    assert pod_problems(pods) == (
        (
            PodProblem("a", "Unschedulable", "0/1 nodes"),
            PodProblem("b", "CrashLoopBackOff", "back-off"),
        ),
        (),
    )


NOW = dt.datetime(2026, 12, 2, 6, 0, 0, tzinfo=dt.UTC)


def _unschedulable(age_seconds: float, grace: int = 30) -> dict[str, Any]:
    created = (NOW - dt.timedelta(seconds=age_seconds)).isoformat().replace("+00:00", "Z")
    return {
        "metadata": {"name": "new", "creationTimestamp": created},
        "spec": {"terminationGracePeriodSeconds": grace},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 1 Insufficient cpu",
                }
            ],
        },
    }


def test_an_unschedulable_pod_within_its_grace_is_a_rollout_in_progress() -> None:
    """maxSurge 0 on a full node: the new pod waits for the old one to stop (its grace period)
    and for the scheduler's next try; that is a rollout in progress, not Degraded with a
    Warning on every rollout. After the grace it is Degraded/Unschedulable."""
    problems, waiting = pod_problems([_unschedulable(20)], NOW)
    assert (problems, [w.pod for w in waiting]) == ((), ["new"])
    obs = Observed(
        deployment=deployment(1, total=1, updated=1, ready=0, available=0),
        pods_waiting=waiting,
    )
    conds = {
        c["type"]: c
        for c in compute_status(service("minimal"), obs, {}, SETTINGS, T0)["conditions"]
    }
    assert (conds["Degraded"]["status"], conds["Progressing"]["reason"]) == ("False", "RollingOut")
    assert "pod new waits to be scheduled (0/3 nodes" in conds["Progressing"]["message"]
    # the grace: 60 s beyond the longest termination grace period of the service's pods
    assert pod_problems([_unschedulable(89, grace=30)], NOW)[0] == ()
    late = pod_problems([_unschedulable(91, grace=30)], NOW)
    assert [(p.pod, p.reason) for p in late[0]] == [("new", "Unschedulable")]
    assert pod_problems([_unschedulable(150, grace=120)], NOW)[0] == ()
    # a pod without a creation time (not from an API server) is judged at once
    undated = _unschedulable(0)
    del undated["metadata"]["creationTimestamp"]
    assert [p.reason for p in pod_problems([undated], NOW)[0]] == ["Unschedulable"]


def _restarted(ready: bool, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "vllm",
                    "ready": ready,
                    "restartCount": 2,
                    "state": state,
                    "lastState": {
                        "terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "message": "api_server.py: error: unrecognized arguments: --bogus",
                        }
                    },
                }
            ],
        },
    }


def test_a_crash_loop_stays_degraded_between_restarts() -> None:
    """Just after the kubelet restarts a crashing container it is running (not ready) and not
    waiting in CrashLoopBackOff: still a crash loop, with the last exit's code and message."""
    expected = (
        "container vllm exited with code 1 (Error), restarted 2 times: "
        "api_server.py: error: unrecognized arguments: --bogus"
    )
    for state in ({"running": {"startedAt": "2026-12-02T06:00:00Z"}}, {"waiting": {}}):
        problems, _ = pod_problems([_restarted(False, state)], NOW)
        assert problems == (PodProblem("p", "CrashLoopBackOff", expected),)
    backoff = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}}
    assert pod_problems([_restarted(False, backoff)], NOW)[0][0].message == expected
    # once it is ready, an earlier crash is history
    assert pod_problems([_restarted(True, {"running": {}}), _unschedulable(5)], NOW)[0] == ()
    obs = Observed(
        deployment=deployment(1, total=1, updated=1, ready=0, available=0),
        pod_problems=pod_problems([_restarted(False, {"running": {}})], NOW)[0],
    )
    conds = {
        c["type"]: c
        for c in compute_status(service("minimal"), obs, {}, SETTINGS, T0)["conditions"]
    }
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"]) == (
        "True",
        "CrashLoopBackOff",
    )
    assert "unrecognized arguments: --bogus" in conds["Degraded"]["message"]


def test_pods_that_cannot_be_created_are_reported_not_a_rollout_in_progress() -> None:
    quota = (
        'pods "minimal-5d8f-x" is forbidden: exceeded quota: gpus, requested: '
        "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=0, limited: "
        "requests.nvidia.com/gpu=0"
    )
    dep = deployment(
        2,
        total=0,
        updated=0,
        ready=0,
        available=0,
        conditions=[
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated"},
            {
                "type": "ReplicaFailure",
                "status": "True",
                "reason": "FailedCreate",
                "message": quota,
            },
        ],
    )
    st = brief(status(Observed(deployment=dep)))
    assert st["Ready"] == (
        "False",
        "FailedCreate",
        f"0/2 replicas available; pods cannot be created: {quota}",
    )
    assert st["Progressing"] == ("False", "FailedCreate", f"pods cannot be created: {quota}")
    assert st["Degraded"] == ("True", "FailedCreate", f"pods cannot be created: {quota}")


def test_a_resolved_replica_failure_is_no_longer_reported() -> None:
    dep = deployment(
        2, conditions=[{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}]
    )
    st = brief(status(Observed(deployment=dep)))  # all replicas are there: it was resolved
    assert st["Ready"][:2] == ("True", "Available")
    assert st["Degraded"][:2] == ("False", "AsExpected")


def test_apply_failed_keeps_the_rest_of_the_status_and_other_conditions() -> None:
    old = {
        "observedGeneration": 3,
        "replicas": 2,
        "benchmark": {"revision": "abc", "state": "Complete"},
        "conditions": [
            c("Ready", "True", "Available", "2/2"),
            c("BenchmarkComplete", "True", "Measured", "revision abc: ..."),
        ],
    }
    st = apply_failed_status(old, GEN, "Service minimal: forbidden: exceeded quota", T1)
    assert st["observedGeneration"] == GEN
    assert st["replicas"] == 2
    assert st["benchmark"] == old["benchmark"]
    assert brief(st) == {
        "Ready": ("False", "ApplyFailed", "Service minimal: forbidden: exceeded quota"),
        "Progressing": (
            "False",
            "ApplyFailed",
            f"generation {GEN} could not be applied; retrying with back-off",
        ),
        "Degraded": ("True", "ApplyFailed", "Service minimal: forbidden: exceeded quota"),
        "ChildrenSynced": ("False", "ApplyFailed", "Service minimal: forbidden: exceeded quota"),
        "BenchmarkComplete": ("True", "Measured", "revision abc: ..."),
    }
    assert cond(st, "Ready")["observedGeneration"] == GEN
    assert cond(st, "Ready")["lastTransitionTime"] == T1


# ---- autoscaling and monitoring ------------------------------------------------------------


def hpa(
    conditions: list[dict[str, Any]] | None, current: str | None = "20", **status_: Any
) -> dict[str, Any]:
    """The live HPA the operator renders (band metric, target 20), as its controller wrote it."""
    metric = {"name": "vllm_operator:queue_depth_band"}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "minimal", "namespace": "ns"},
        "spec": {
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": metric,
                        "target": {"type": "AverageValue", "averageValue": "20"},
                    },
                }
            ]
        },
        "status": {
            **status_,
            **({"conditions": conditions} if conditions is not None else {}),
            **(
                {
                    "currentMetrics": [
                        {
                            "type": "Pods",
                            "pods": {"metric": metric, "current": {"averageValue": current}},
                        }
                    ]
                }
                if current is not None
                else {}
            ),
        },
    }


def scaled(spec: dict[str, Any] | None = None) -> Any:
    return service("minimal", {"autoscaling": {"enabled": True}, **(spec or {})}, generation=GEN)


NO_API = (
    "the HPA was unable to compute the replica count: unable to get metric "
    "vllm_operator:queue_depth_band: unable to fetch metrics from custom metrics API: "
    "no custom metrics API (custom.metrics.k8s.io) registered"
)


def test_autoscaling_carries_the_hpas_own_scaling_active_and_numbers() -> None:
    live = hpa(
        [
            {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"},
            {
                "type": "ScalingActive",
                "status": "True",
                "reason": "ValidMetricFound",
                "message": "the HPA was able to successfully calculate a replica count from "
                "pods metric vllm_operator:queue_depth_band",
            },
        ],
        current="24",
        currentReplicas=2,
        desiredReplicas=3,
        lastScaleTime="2030-01-01T00:04:00Z",
    )
    st = compute_status(scaled(), Observed(deployment(), hpa=live), {}, SETTINGS, T1)
    assert st["autoscaling"] == {
        "horizontalPodAutoscaler": "minimal",
        "currentReplicas": 2,
        "desiredReplicas": 3,
        "metric": "vllm_operator:queue_depth_band",
        "currentAverageValue": "24",
        "targetAverageValue": "20",
        "lastScaleTime": "2030-01-01T00:04:00Z",
        "policy": "QueueBand",
        "targetFrom": "autoscaling.targetQueueDepth (scale down at <= 2 waiting per pod)",
    }
    assert cond(st, "AutoscalingActive") == {
        "type": "AutoscalingActive",
        "status": "True",
        "reason": "ValidMetricFound",
        "message": "the HPA was able to successfully calculate a replica count from pods "
        "metric vllm_operator:queue_depth_band",
        "lastTransitionTime": T1,
        "observedGeneration": GEN,
    }
    assert cond(st, "Ready")["status"] == "True"  # the autoscaler does not gate serving


def test_no_custom_metrics_api_shows_on_the_service() -> None:
    live = hpa(
        [
            {
                "type": "ScalingActive",
                "status": "False",
                "reason": "FailedGetPodsMetric",
                "message": NO_API,
            }
        ],
        current=None,
        currentReplicas=2,
        desiredReplicas=2,
    )
    old = {"conditions": [c("AutoscalingActive", "False", "FailedGetPodsMetric", NO_API)]}
    st = compute_status(scaled(), Observed(deployment(), hpa=live), old, SETTINGS, T1)
    assert st["autoscaling"] == {
        "horizontalPodAutoscaler": "minimal",
        "currentReplicas": 2,
        "desiredReplicas": 2,
        "metric": "vllm_operator:queue_depth_band",
        "targetAverageValue": "20",
        "policy": "QueueBand",
        "targetFrom": "autoscaling.targetQueueDepth (scale down at <= 2 waiting per pod)",
    }
    # unchanged: the transition time stays
    assert cond(st, "AutoscalingActive") == {
        **c("AutoscalingActive", "False", "FailedGetPodsMetric", NO_API),
        "observedGeneration": GEN,
    }


@pytest.mark.parametrize(
    ("live", "expected"),
    [
        (
            None,
            (
                "Unknown",
                "HorizontalPodAutoscalerMissing",
                "the HorizontalPodAutoscaler minimal is being created",
            ),
        ),
        (
            hpa(None, current=None),
            (
                "Unknown",
                "Pending",
                "the HorizontalPodAutoscaler minimal has not been evaluated yet",
            ),
        ),
    ],
)
def test_autoscaling_before_the_hpa_controller_has_spoken(
    live: dict[str, Any] | None, expected: tuple[str, str, str]
) -> None:
    st = compute_status(scaled(), Observed(deployment(), hpa=live), {}, SETTINGS, T1)
    assert brief(st)["AutoscalingActive"] == expected
    if live is None:
        assert "autoscaling" not in st


def test_no_autoscaling_no_autoscaler_status() -> None:
    st = compute_status(
        service("minimal", generation=GEN), Observed(deployment()), {}, SETTINGS, T1
    )
    assert "autoscaling" not in st
    assert "AutoscalingActive" not in brief(st)


def test_monitoring_condition_says_whether_the_prometheus_operator_is_there() -> None:
    def monitoring(svc: Any, crds: bool | None) -> tuple[str, str, str] | None:
        st = compute_status(svc, Observed(deployment()), {}, SETTINGS, T1, monitoring_crds=crds)
        return brief(st).get("Monitoring")

    plain = service("minimal", generation=GEN)
    assert monitoring(plain, True) == ("True", "Rendered", "PrometheusRule and PodMonitor applied")
    assert monitoring(plain, False) == (
        "False",
        "PrometheusOperatorMissing",
        (
            "the Prometheus Operator's CRDs (prometheusrules, podmonitors.monitoring.coreos.com) "
            "are not installed: no PrometheusRule or PodMonitor for this service; install the "
            "rules file deploy/monitoring/vllm-alerts.rules.yaml and the scrape configs "
            "deploy/monitoring/prometheus-scrape-configs.yaml in your Prometheus instead"
        ),
    )
    assert monitoring(plain, None) is None  # not looked at
    no_pod_monitor = service("minimal", {"monitoring": {"podMonitor": False}}, generation=GEN)
    assert monitoring(no_pod_monitor, True) == ("True", "Rendered", "PrometheusRule applied")
    off = service("minimal", {"monitoring": {"enabled": False}}, generation=GEN)
    assert monitoring(off, False) is None


# ---- a failed verdict being confirmed (issue 10, item 7) ----------------------------------


def confirming_view(state: str | None, message: str = "") -> BenchView:
    runs = (
        ()
        if state is None
        else (Run("rev1", "minimal-bench-rev1-ab12", "t2", state, "", message=message),)
    )
    return BenchView(
        revision="rev1",
        run_name="minimal-bench-rev1-ab12",
        runs=runs,
        failures=("outputTokensPerSecond 10 < minimum 50",),
        rollout_done=True,
        gated=True,
        confirming="run minimal-bench-rev1 failed its gates (...); run minimal-bench-rev1-ab12 "
        "measures revision rev1 again before any rollback",
    )


def bench_status(view: BenchView) -> dict[str, Any]:
    svc = service("minimal", generation=GEN)
    return compute_status(svc, Observed(deployment=deployment()), {}, SETTINGS, T1, bench=view)


@pytest.mark.parametrize("state", [None, "Running"])
def test_while_a_failed_verdict_is_confirmed_nothing_is_degraded(state: str | None) -> None:
    view = confirming_view(state)
    st = bench_status(view)
    got = brief(st)
    assert got["BenchmarkComplete"] == ("False", "ConfirmingFailure", view.confirming)
    assert got["BenchmarkPassed"] == (
        "Unknown",
        "Confirming",
        "the first run failed (outputTokensPerSecond 10 < minimum 50); a second run decides",
    )
    assert got["Degraded"] == ("False", "AsExpected", "")
    assert st["benchmark"]["failures"] == ["outputTokensPerSecond 10 < minimum 50"]
    assert "passed" not in st["benchmark"]


def test_a_confirmation_that_failed_to_measure_says_nothing_was_rolled_back() -> None:
    st = bench_status(confirming_view("Failed", "BackoffLimitExceeded: exit 1"))
    got = brief(st)
    assert got["BenchmarkComplete"] == (
        "False",
        "BenchmarkFailed",
        (
            "BackoffLimitExceeded: exit 1 (this run was to confirm a failed verdict: not "
            "rolled back on one measurement; the rerun-benchmark annotation measures again)"
        ),
    )
    assert got["BenchmarkPassed"][:2] == ("False", "ThresholdsNotMet")
    assert got["Degraded"][0] == "False"


def test_a_failed_benchmark_job_carries_its_runner_s_own_message() -> None:
    """A runner that refuses its arguments exits 2 with argparse's message, which the kubelet
    keeps as the termination message (FallbackToLogsOnError): the Job's failure quotes it."""
    job = {
        "metadata": {"name": "m-bench-1", "labels": {}},
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ]
        },
    }
    pod = {
        "metadata": {"name": "m-bench-1-x"},
        "status": {
            "containerStatuses": [
                {
                    "name": "bench",
                    "state": {
                        "terminated": {
                            "exitCode": 2,
                            "reason": "Error",
                            "finishedAt": "2026-12-02T06:00:00Z",
                            "message": "vllm-bench run: error: unrecognized arguments: --URL=x\n",
                        }
                    },
                }
            ]
        },
    }
    state = job_state(job, pods=[pod])
    assert state.failed_reason == "BackoffLimitExceeded"
    assert state.failed_message == (
        "Job has reached the specified backoff limit; pod m-bench-1-x exited with code 2 "
        "(Error): vllm-bench run: error: unrecognized arguments: --URL=x"
    )
    assert job_state(job).failed_message == "Job has reached the specified backoff limit"


def test_an_unschedulable_pod_that_no_node_can_ever_take_is_degraded_at_once() -> None:
    """Waiting helps only when room is short; a node selector that matches no node (or an
    untolerated taint alone) is a configuration error: Degraded with its Warning at once."""
    pod = _unschedulable(5)
    pod["status"]["conditions"][0]["message"] = (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )
    problems, waiting = pod_problems([pod], NOW)
    assert ([p.reason for p in problems], waiting) == (["Unschedulable"], ())


def measured_status(latency_p99: float, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """status of a service whose run of rev1 completed, its requests taking `latency_p99` s
    (p99 under concurrent load)."""
    result = {
        "status": "ok",
        "headline": {"outputTokensPerSecond": 100.0, "requestLatencyP99Seconds": latency_p99},
    }
    view = BenchView(
        revision="rev1",
        run_name="minimal-bench-rev1",
        runs=(Run("rev1", "minimal-bench-rev1", "t2", "Complete", "", result=result),),
        rollout_done=True,
    )
    svc = service("minimal", spec, generation=GEN)
    return compute_status(svc, Observed(deployment=deployment()), {}, SETTINGS, T1, bench=view)


def test_requests_that_outlast_the_drain_are_said_on_benchmark_complete() -> None:
    """Issue 21, item 3: in-flight streams finish within shutdownTimeoutSeconds when a pod
    stops (105 s by default); the benchmark measures how long requests take, and a drain
    shorter than that is said (a stream that long is cut on a rollout or a scale-in)."""
    covered = measured_status(3.2)
    assert covered["benchmark"]["requestLatencyP99Seconds"] == 3.2
    kind, reason, message = brief(covered)["BenchmarkComplete"]
    assert (kind, reason) == ("True", "Measured")
    assert "requests took" not in message
    short = measured_status(40.0, {"shutdownTimeoutSeconds": 30})
    message = brief(short)["BenchmarkComplete"][2]
    assert (
        "; requests took up to 40 s (p99 under concurrent load), longer than the 30 s that "
        "requests in flight get to finish when a pod stops (shutdownTimeoutSeconds): streams "
        "that long are cut on rollouts and scale-ins"
    ) in message
    off = brief(measured_status(0.5, {"shutdownTimeoutSeconds": 0}))["BenchmarkComplete"][2]
    assert "(shutdownTimeoutSeconds: 0, vLLM aborts them at once)" in off


# a crash-looping vLLM's log end (its termination message: FallbackToLogsOnError keeps the last
# 2,048 bytes or 80 lines): the cause is the raised exception, then shutdown noise follows
VLLM_LOG_END = (
    "(EngineCore_DP0 pid=81) ERROR 12-04 10:00:00 [core.py:708]     self.model_execut"
    "or = executor_class(vllm_config)\n"
    '(EngineCore_DP0 pid=81) ERROR 12-04 10:00:00 [core.py:708]   File "/opt/vllm/lib'
    '/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", line 240, in determine_'
    "available_memory\n"
    "(EngineCore_DP0 pid=81) ERROR 12-04 10:00:00 [core.py:708]     raise ValueError(\n"
    "(EngineCore_DP0 pid=81) ERROR 12-04 10:00:00 [core.py:708] ValueError: To serve "
    "at least one request with the models's max seq len (32768), (4.00 GiB KV cache i"
    "s needed, which is larger than the available KV cache memory (1.00 GiB). Based o"
    "n the available memory, the estimated maximum model length is 8192. Try increasi"
    "ng `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
    "engine.\n"
    "(EngineCore_DP0 pid=81) Process EngineCore_DP0:\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap\n'
    "    self.run()\n"
    "RuntimeError: Engine core initialization failed. See root cause above. Failed co"
    "re proc(s): {}\n"
    "[rank0]:[W1204 10:00:01.000000000 ProcessGroupNCCL.cpp:1479] Warning: WARNING: d"
    "estroy_process_group() was not called before program exit\n"
    "\n"
)


def test_a_crash_loops_message_quotes_the_cause_not_the_log_from_mid_sentence() -> None:
    # (issue 31: the last 400 characters began mid-sentence and cut off the line naming the
    # cause); the last exception line is quoted from the exception's name
    # (vLLM's wrapper "RuntimeError: Engine core initialization failed. See root cause above."
    # comes last: the exception before it is the cause)
    root = cause(VLLM_LOG_END)
    assert root.startswith("ValueError: To serve at least one request with the models's max seq")
    assert root.endswith("when initializing the engine.")  # whole, from its start
    assert len(root) <= MESSAGE_TAIL
    # the last exception line otherwise
    assert cause("Traceback:\n  File x\nOSError: [Errno 28] No space left on device\nbye") == (
        "OSError: [Errno 28] No space left on device"
    )
    # no exception line: whole lines from the end, never from mid-line
    plain = cause("starting\nloading weights\nkilled by the OOM killer")
    assert plain == "starting / loading weights / killed by the OOM killer"
