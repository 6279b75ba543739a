"""Progressive delivery (issue 21, item 1): with gates set, a new revision is benchmarked on one
canary pod that the Service does not select, and only then promoted; through reconcile()
against the in-memory API server, step by step, with the serving Deployment's template checked
at every step (a revision that never reaches it served no request)."""

from __future__ import annotations

import copy
import dataclasses as dc
import datetime as dt
from typing import Any

from tests.chart_support import argocd_health
from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, applied, publish, rolled_out, template_revision
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import ABORT_ANNOTATION, PROMOTE_ANNOTATION, Service
from vllm_operator.decide.policy import ABORTED_BY_HAND, SUPERSEDED, Plan, confirming, decide
from vllm_operator.decide.progressive import progress
from vllm_operator.observe.read import history, observe
from vllm_operator.observe.state import Observed
from vllm_operator.reconcile import Outcome, reconcile
from vllm_operator.render.benchmark import revision, run_name
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.write.apply import _path

SETTINGS = OperatorSettings()
PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
DEP = _path("apps/v1", "Deployment", "ns", "minimal")
CANARY = _path("apps/v1", "Deployment", "ns", "minimal-canary")
SVC = _path("v1", "Service", "ns", "minimal")
GATES = {"onFailure": "Rollback", "thresholds": {"minOutputTokensPerSecond": 50}}


def spec(seqs: int, bench: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"engine": {"maxNumSeqs": seqs}, "benchmark": GATES if bench is None else bench, **extra}


def svc(seqs: int, bench: dict[str, Any] | None = None, **extra: Any) -> Service:
    return Service.from_body(body("minimal", spec(seqs, bench, **extra)))


def rev(seqs: int) -> str:
    return revision(render_pod_template(svc(seqs), SETTINGS))


def reconciled(api: FakeApi) -> Outcome:
    return reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)


def apply_spec(
    api: FakeApi, seqs: int, bench: dict[str, Any] | None = None, **extra: Any
) -> Outcome:
    """The user applies a spec; the operator reconciles it once."""
    generation = api.objects[PATH]["metadata"]["generation"] + 1 if PATH in api.objects else 1
    obj = body("minimal", spec(seqs, bench, **extra), generation=generation)
    if PATH in api.objects:
        obj["metadata"]["annotations"] = api.objects[PATH]["metadata"].get("annotations") or {}
        obj["status"] = api.objects[PATH].get("status") or {}
    api.put(PATH, obj)
    return reconciled(api)


def annotate(api: FakeApi, key: str, value: str) -> Outcome:
    api.objects[PATH]["metadata"].setdefault("annotations", {})[key] = value
    return reconciled(api)


def passed_on_canary(api: FakeApi, bench: dict[str, Any] | None = None, **extra: Any) -> None:
    """Revision 8 serves; 16 is measured on its canary, and its run passes (70 tok/s)."""
    stable(api, 8)
    apply_spec(api, 16, bench, **extra)
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    publish(api, run_name(svc(16), rev(16)), 70)


def serving_revision(api: FakeApi) -> str:
    return template_revision(api.objects[DEP])


def canary_revision(api: FakeApi) -> str:
    """The revision the canary's pod template is of (its selector labels put back), as the
    operator applied it."""
    template = applied(api, CANARY)["spec"]["template"]
    template["metadata"]["labels"]["app.kubernetes.io/instance"] = "minimal"
    template["metadata"]["labels"]["app.kubernetes.io/component"] = "server"
    return revision(template)


def rollout(api: FakeApi) -> dict[str, Any]:
    return dict(api.objects[PATH]["status"].get("rollout") or {})


def cond(api: FakeApi, kind: str) -> dict[str, Any]:
    return next(c for c in api.objects[PATH]["status"]["conditions"] if c["type"] == kind)


def stable(api: FakeApi, seqs: int = 8) -> None:
    """Revision `seqs` serves, measured and passed (the first rollout has no canary: nothing
    served before it)."""
    apply_spec(api, seqs)
    rolled_out(api)
    reconciled(api)
    publish(api, run_name(svc(seqs), rev(seqs)), 60)
    reconciled(api)
    assert rollout(api) == {}


def events(outcome: Outcome) -> list[tuple[str, str]]:
    return [(e.type, e.reason) for e in outcome.events]


def test_a_good_revision_is_measured_on_the_canary_alone_then_promoted() -> None:
    api = FakeApi(SETTINGS)
    stable(api, 8)
    outcome = apply_spec(api, 16)
    # the serving pods stay at 8; one canary pod of 16, which the Service does not select
    assert serving_revision(api) == rev(8)
    assert canary_revision(api) == rev(16)
    assert api.objects[CANARY]["spec"]["replicas"] == 1
    pod_labels = api.objects[CANARY]["spec"]["template"]["metadata"]["labels"]
    selector = api.objects[SVC]["spec"]["selector"]
    assert not all(pod_labels.get(k) == v for k, v in selector.items())
    assert api.objects[DEP]["spec"]["selector"]["matchLabels"].items() - pod_labels.items()
    assert (rollout(api)["phase"], rollout(api)["revision"], rollout(api)["stableRevision"]) == (
        "Canary",
        rev(16),
        rev(8),
    )
    progressing = cond(api, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "Canary")
    assert ("Normal", "RolloutCanary") in events(outcome)
    assert api.objects[PATH]["status"]["revision"] == rev(8)  # what serves
    # Argo CD waits: Progressing while the canary is measured (the stable pods are Ready)
    assert cond(api, "Ready")["status"] == "True"
    assert argocd_health(api.objects[PATH])[0] == "Progressing"
    # the canary is up: its run measures the canary's pod, not a serving one
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    run = run_name(svc(16), rev(16))
    current = next(r for r in history(api, svc(16)) if r.name == run)
    assert current.target is not None
    assert current.target.pod.startswith("minimal-canary-")
    assert current.served_before == rev(8)
    assert serving_revision(api) == rev(8)
    # it passes: promoted; the canary scales to 0
    publish(api, run, 70)
    outcome = reconciled(api)
    assert serving_revision(api) == rev(16)
    assert api.objects[CANARY]["spec"]["replicas"] == 0
    assert rollout(api)["phase"] == "Promoting"
    assert ("Normal", "RolloutPromoting") in events(outcome)
    rolled_out(api)
    outcome = reconciled(api)
    assert rollout(api)["phase"] == "Promoted"
    assert ("Normal", "RolloutPromoted") in events(outcome)
    assert argocd_health(api.objects[PATH])[0] == "Healthy"
    # measured once: no second run of 16 on the serving pods
    assert [r.name for r in history(api, svc(16)) if r.revision == rev(16)] == [run]
    passed = cond(api, "BenchmarkPassed")
    assert passed["status"] == "True"
    # a resync writes nothing
    before = len(api.writes_made())
    assert reconciled(api).changes == ()
    assert len(api.writes_made()) == before


def test_a_failing_revision_is_stopped_at_the_canary_and_never_serves() -> None:
    api = FakeApi(SETTINGS)
    stable(api, 8)
    apply_spec(api, 16)
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    first = run_name(svc(16), rev(16))
    publish(api, first, 10)  # fails: a second run on the canary confirms it first
    reconciled(api)
    assert serving_revision(api) == rev(8)
    assert api.objects[CANARY]["spec"]["replicas"] == 1
    assert rollout(api)["phase"] == "Canary"
    second = run_name(confirming(svc(16)), rev(16))
    runs = {r.name: r for r in history(api, svc(16))}
    assert runs[second].target is not None
    assert runs[second].target.pod.startswith("minimal-canary-")
    publish(api, second, 12)
    outcome = reconciled(api)
    assert serving_revision(api) == rev(8)  # it never served
    assert api.objects[CANARY]["spec"]["replicas"] == 0
    assert outcome.rolled_back_to == rev(8)
    assert rollout(api)["phase"] == "Aborted"
    assert "served no request" in rollout(api)["message"]
    degraded = cond(api, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "BenchmarkRollback")
    assert "on the canary" in degraded["message"]
    assert ("Warning", "RolloutAborted") in events(outcome)
    assert argocd_health(api.objects[PATH]) == (
        "Degraded",
        f"BenchmarkRollback: {degraded['message']}",
    )
    # and it stays so
    rolled_out(api)
    reconciled(api)
    assert serving_revision(api) == rev(8)
    assert rollout(api)["phase"] == "Aborted"
    # the next spec change gets a canary of its own
    apply_spec(api, 32)
    assert (serving_revision(api), canary_revision(api)) == (rev(8), rev(32))
    assert api.objects[CANARY]["spec"]["replicas"] == 1
    assert rollout(api)["phase"] == "Canary"


def test_a_later_spec_change_supersedes_a_canary_in_progress() -> None:
    api = FakeApi(SETTINGS)
    stable(api, 8)
    apply_spec(api, 16)
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    run16 = run_name(svc(16), rev(16))
    job = _path("batch/v1", "Job", "ns", run16)
    api.objects[job]["status"] = {"active": 1}
    apply_spec(api, 32)
    assert job not in api.objects
    assert {r.name: r.message for r in history(api, svc(8))}[run16] == SUPERSEDED
    assert (serving_revision(api), canary_revision(api)) == (rev(8), rev(32))
    assert rollout(api)["revision"] == rev(32)


def test_promote_by_hand_serves_it_whatever_its_benchmark_says() -> None:
    api = FakeApi(SETTINGS)
    stable(api, 8)
    apply_spec(api, 16)
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    run16 = run_name(svc(16), rev(16))
    api.objects[_path("batch/v1", "Job", "ns", run16)]["status"] = {"active": 1}
    # an annotation naming another revision does nothing
    annotate(api, PROMOTE_ANNOTATION, rev(32))
    assert serving_revision(api) == rev(8)
    outcome = annotate(api, PROMOTE_ANNOTATION, rev(16))
    assert serving_revision(api) == rev(16)
    assert rollout(api)["phase"] == "Promoting"
    assert "by hand" in rollout(api)["message"]
    assert ("Normal", "RolloutPromoting") in events(outcome)
    assert _path("batch/v1", "Job", "ns", run16) not in api.objects  # its run stopped
    # once it serves, a new run measures it; a failure then rolls nothing back
    rolled_out(api)
    reconciled(api)
    runs = [r for r in history(api, svc(16)) if r.revision == rev(16)]
    assert [r.state for r in runs] == ["Failed", "Running"]
    assert runs[1].target is not None
    assert not runs[1].target.pod.startswith("minimal-canary-")
    publish(api, runs[1].name, 10)
    reconciled(api)
    reconciled(api)
    assert serving_revision(api) == rev(16)
    assert api.objects[PATH]["status"]["benchmark"].get("rolledBackTo") is None
    assert cond(api, "BenchmarkPassed")["status"] == "False"


def test_abort_by_hand_keeps_the_stable_revision() -> None:
    api = FakeApi(SETTINGS)
    stable(api, 8)
    apply_spec(api, 16)
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    run16 = run_name(svc(16), rev(16))
    api.objects[_path("batch/v1", "Job", "ns", run16)]["status"] = {"active": 1}
    outcome = annotate(api, ABORT_ANNOTATION, rev(16))
    assert serving_revision(api) == rev(8)
    assert api.objects[CANARY]["spec"]["replicas"] == 0
    assert rollout(api)["phase"] == "Aborted"
    degraded = cond(api, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "CanaryAborted")
    assert ("Warning", "RolloutAborted") in events(outcome)
    assert {r.name: r.message for r in history(api, svc(16))}[run16] == ABORTED_BY_HAND
    reconciled(api)
    assert serving_revision(api) == rev(8)


def test_an_abort_after_the_serving_pods_began_to_roll_is_said_not_ignored() -> None:
    # (issue 32, item 6: it was ignored in silence once the revision was Promoting)
    api = FakeApi(SETTINGS)
    passed_on_canary(api)
    reconciled(api)
    assert (rollout(api)["phase"], serving_revision(api)) == ("Promoting", rev(16))
    annotate(api, ABORT_ANNOTATION, rev(16))
    assert rollout(api)["phase"] in ("Promoting", "Promoted")
    assert serving_revision(api) == rev(16)
    assert "came after the serving pods began to roll to it" in rollout(api)["message"]


def test_while_a_good_revision_is_promoting_ready_says_the_stable_pod_serves() -> None:
    # (issue 31: READY was False while the stable pod kept serving)
    api = FakeApi(SETTINGS)
    passed_on_canary(api)
    # the serving Deployment rolls: its surge pod of 16 not Ready yet, the pod of 8 serving
    api.objects[DEP]["metadata"]["generation"] = 2
    api.objects[DEP]["status"] = {
        "observedGeneration": 2,
        "replicas": 2,
        "updatedReplicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
    }
    reconciled(api)
    assert rollout(api)["phase"] == "Promoting"
    ready = cond(api, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Promoting"), ready
    assert "1 replicas available serve" in ready["message"]
    # nothing available (a one-replica service with maxUnavailable 1 mid-roll): not Ready
    api.objects[DEP]["status"] = {**api.objects[DEP]["status"], "availableReplicas": 0}
    reconciled(api)
    assert cond(api, "Ready")["status"] == "False"


def test_under_report_a_failing_revision_is_measured_first_then_promoted() -> None:
    report = {"onFailure": "Report", "thresholds": {"minOutputTokensPerSecond": 50}}
    api = FakeApi(SETTINGS)
    apply_spec(api, 8, report)
    rolled_out(api)
    reconciled(api)
    apply_spec(api, 16, report)
    assert serving_revision(api) == rev(8)
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    publish(api, run_name(svc(16, report), rev(16)), 10)
    reconciled(api)
    assert serving_revision(api) == rev(16)
    assert cond(api, "BenchmarkPassed")["status"] == "False"
    assert rollout(api)["phase"] == "Promoting"


def test_without_gates_or_with_the_canary_off_the_rollout_is_direct() -> None:
    for bench, extra in (
        ({}, {}),
        (GATES, {"rollout": {"canary": {"enabled": False}}}),
    ):
        api = FakeApi(SETTINGS)
        apply_spec(api, 8, bench, **extra)
        rolled_out(api)
        reconciled(api)
        apply_spec(api, 16, bench, **extra)
        assert serving_revision(api) == rev(16)
        assert CANARY not in api.objects
        assert rollout(api) == {}


def test_a_deployment_of_an_earlier_operator_rolls_out_directly_once() -> None:
    """No served-spec annotation: nothing to hold the serving pods at (the next revision,
    written by this operator, goes through a canary)."""
    api = FakeApi(SETTINGS)
    stable(api, 8)
    del api.objects[DEP]["metadata"]["annotations"]["serving.vllm-operator.dev/served-spec"]
    apply_spec(api, 16)
    assert serving_revision(api) == rev(16)
    assert CANARY not in api.objects


def _pending(api: FakeApi, name: str, template: dict[str, Any], age: float = 0.0) -> None:
    """A pod of `template`'s labels, created `age` seconds ago, that waits for a GPU."""
    created = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=age)
    stamp = created.replace(microsecond=0).isoformat().replace("+00:00", "Z")
    api.put(
        _path("v1", "Pod", "ns", name),
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "creationTimestamp": stamp,
                "labels": dict(template["metadata"]["labels"]),
            },
            "spec": {},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                    }
                ],
            },
        },
    )


def _unschedulable(api: FakeApi) -> None:
    """The canary's pod waits for a GPU (just created: within the scheduling grace)."""
    _pending(api, "minimal-canary-abc-x1", api.objects[CANARY]["spec"]["template"])


def test_no_room_for_the_canary_waits_and_says_so_or_takes_one_stable_pod_out() -> None:
    for policy, replicas in (("Wait", 3), ("ReplaceStable", 2)):
        extra = {"replicas": 3, "rollout": {"canary": {"whenNoRoom": policy}}}
        api = FakeApi(SETTINGS)
        apply_spec(api, 8, None, **extra)
        rolled_out(api)
        reconciled(api)
        apply_spec(api, 16, None, **extra)
        _unschedulable(api)
        reconciled(api)
        assert api.objects[DEP]["spec"]["replicas"] == replicas, policy
        message = rollout(api)["message"]
        assert "Insufficient nvidia.com/gpu" in message, message
        assert serving_revision(api) == rev(8)
    # ReplaceStable: the canary measured and promoted, the count is the spec's again
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    assert api.objects[DEP]["spec"]["replicas"] == 2  # still one out while it is measured
    publish(api, run_name(svc(16, None, **extra), rev(16)), 70)
    reconciled(api)
    assert (serving_revision(api), api.objects[DEP]["spec"]["replicas"]) == (rev(16), 3)


# ---- the pure decision step (progressive.progress), with exact inputs ----------------------


def _observed_canary(seqs: int = 16) -> tuple[Service, Observed, Plan]:
    """A service at 8 whose spec asks for `seqs`, the canary up: (service, observed, plan)."""
    api = FakeApi(SETTINGS)
    stable(api, 8)
    apply_spec(api, seqs)
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    current = Service.from_body(api.objects[PATH])
    seen = observe(api, current)
    return current, seen, decide(current, seen, SETTINGS)


def test_progress_holds_the_serving_pods_while_the_canary_is_measured() -> None:
    current, seen, plan = _observed_canary()
    assert plan.canary
    assert plan.start is None  # its run was started by the reconcile above
    _, rollout_ = progress(current, seen, plan)
    assert (rollout_.phase, rollout_.canary_replicas, rollout_.take_one) == ("Canary", 1, False)
    assert rollout_.hold is not None
    assert revision(render_pod_template(rollout_.hold, SETTINGS)) == rev(8)
    assert (rollout_.revision, rollout_.stable) == (rev(16), rev(8))


def test_progress_by_hand_stops_the_run_and_names_only_its_revision() -> None:
    current, seen, plan = _observed_canary()
    run = run_name(current, rev(16))
    jobs = tuple(dc.replace(j, active=True) if j.name == run else j for j in seen.jobs)
    seen = dc.replace(seen, jobs=jobs)
    other = current.model_copy(update={"abort": rev(32)})
    assert progress(other, seen, plan)[1].phase == "Canary"
    aborting = current.model_copy(update={"abort": rev(16)})
    new_plan, rollout_ = progress(aborting, seen, plan)
    assert (rollout_.phase, rollout_.canary_replicas, rollout_.by_hand) == ("Aborted", 0, True)
    assert new_plan.stop == (run,)
    assert [r.data for r in new_plan.record if r.run == run] == [
        {"state": "Failed", "message": ABORTED_BY_HAND}
    ]
    promoting = current.model_copy(update={"promote": rev(16)})
    new_plan, rollout_ = progress(promoting, seen, plan)
    assert (rollout_.phase, rollout_.hold, rollout_.canary_replicas) == ("Promoting", None, 0)
    assert new_plan.stop == (run,)


def test_a_canary_that_cannot_start_is_degraded_and_the_stable_pods_serve() -> None:
    api = FakeApi(SETTINGS)
    stable(api, 8)
    apply_spec(api, 16)
    template = api.objects[CANARY]["spec"]["template"]
    api.put(
        _path("v1", "Pod", "ns", "minimal-canary-abc-x1"),
        {
            "metadata": {
                "name": "minimal-canary-abc-x1",
                "namespace": "ns",
                "labels": dict(template["metadata"]["labels"]),
            },
            "spec": {},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "vllm",
                        "ready": False,
                        "restartCount": 3,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {
                            "terminated": {"exitCode": 1, "message": "unrecognized arguments"}
                        },
                    }
                ],
            },
        },
    )
    reconciled(api)
    degraded = cond(api, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "CanaryFailing")
    assert "unrecognized arguments" in degraded["message"]
    assert rev(8) in degraded["message"]
    assert cond(api, "Ready")["status"] == "True"
    assert serving_revision(api) == rev(8)
    assert rollout(api)["phase"] == "Canary"


def test_one_replica_surges_and_is_replaced_in_place_when_there_is_no_room() -> None:
    """rollout.oneReplicaSurge (issue 21, item 3): no gates, so no canary; the one replica's
    rollout surges; once its surge pod waits for room, this revision rolls in place and the
    status says so; the next revision tries the surge again."""
    surge = {"maxSurge": 1, "maxUnavailable": 0}
    in_place = {"maxSurge": 0, "maxUnavailable": 1}
    api = FakeApi(SETTINGS)
    apply_spec(api, 8, {})
    rolled_out(api)
    reconciled(api)
    assert api.objects[DEP]["spec"]["strategy"]["rollingUpdate"] == surge
    apply_spec(api, 16, {})
    assert serving_revision(api) == rev(16)
    api.objects[DEP]["status"]["updatedReplicas"] = 0  # the rollout under way
    template = api.objects[DEP]["spec"]["template"]

    def waiting_since(seconds: float) -> None:
        """The surge pod, created `seconds` ago, waits for room."""
        _pending(api, "minimal-new-x1", template, age=seconds)

    # within its grace a terminating pod (a canary scaled to 0, a drain) may free the room
    waiting_since(5)
    reconciled(api)
    assert api.objects[DEP]["spec"]["strategy"]["rollingUpdate"] == surge
    waiting_since(3600)  # past it: given up for this revision, and not Degraded for it
    reconciled(api)
    dep = api.objects[DEP]
    assert dep["spec"]["strategy"]["rollingUpdate"] == in_place
    assert cond(api, "Degraded")["status"] == "False"
    assert dep["metadata"]["annotations"]["serving.vllm-operator.dev/no-room-for-surge"] == rev(16)
    assert "no room for a surge pod" in cond(api, "Progressing")["message"]
    # it stays in place for this revision's rollout, and the next revision surges again
    del api.objects[_path("v1", "Pod", "ns", "minimal-new-x1")]
    rolled_out(api)
    reconciled(api)
    assert api.objects[DEP]["spec"]["strategy"]["rollingUpdate"] == in_place
    apply_spec(api, 32, {})
    assert api.objects[DEP]["spec"]["strategy"]["rollingUpdate"] == surge
