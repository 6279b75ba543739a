"""The benchmark lifecycle as one pure step (policy.decide, issue 10, item 11): every branch
with exact inputs (the service, what observe() read) and exact outputs (the Plan)."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.unit.builders import service
from vllm_operator.api.records import Run
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide.gates import FAILED, PASSED
from vllm_operator.decide.policy import (
    NO_RESULT,
    SUPERSEDED,
    Plan,
    Record,
    Start,
    confirming,
    decide,
    earlier_renderings,
    runs_to_prune,
)
from vllm_operator.observe.state import JobState, Observed, previous_revision
from vllm_operator.render.benchmark import (
    PREVIOUS_REVISION_ANNOTATION,
    REVISION_ANNOTATION,
    revision,
    run_name,
    spec_hash,
)
from vllm_operator.render.deployment import render_pod_template

SETTINGS = OperatorSettings()
SVC = service("minimal")
REV = revision(render_pod_template(SVC, SETTINGS))
RUN = run_name(SVC, REV)
GATES = {"thresholds": {"minOutputTokensPerSecond": 50}}


def with_spec(spec: dict[str, Any]) -> Service:
    return service("minimal", spec)


def deployment(rev: str = REV, *, ready: bool = True, replicas: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": "minimal", "generation": 2, "annotations": {REVISION_ANNOTATION: rev}},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": 2 if ready else 1,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
        },
    }


def seen(
    runs: tuple[Run, ...] = (),
    jobs: tuple[JobState, ...] = (),
    dep: dict[str, Any] | None = None,
) -> Observed:
    return Observed(deployment=dep or deployment(), runs=runs, jobs=jobs)


def run(
    rev: str = REV,
    *,
    name: str | None = None,
    state: str = "Complete",
    tps: float | None = 100.0,
    verdict: str | None = None,
    created: str = "2030-01-01T00:05:00Z",
    spec_json: str = "",
) -> Run:
    result = None if state != "Complete" else {"status": "ok", "headline": {}}
    if result is not None and tps is not None:
        result["headline"] = {"outputTokensPerSecond": tps}
    return Run(
        revision=rev,
        name=name or f"minimal-bench-{rev[:8]}",
        created=created,
        state=state,
        spec_json=spec_json,
        result=result,
        verdict=verdict,
    )


def job(
    name: str = RUN,
    *,
    active: bool = False,
    succeeded: bool = False,
    failed: str | None = None,
    message: str = "",
    generation: int = 1,
) -> JobState:
    return JobState(name, active, succeeded, failed, message, "", generation)


def plan(**fields: Any) -> Plan:
    """The plan of an enabled benchmark for SVC, with `fields` set."""
    return Plan(**{"enabled": True, "revision": REV, "run": RUN, **fields})


# ---- start, resume, wait ------------------------------------------------------------------


def test_a_disabled_benchmark_plans_nothing() -> None:
    svc = with_spec({"benchmark": {"enabled": False}})
    assert decide(svc, seen(), SETTINGS) == Plan()


def test_a_finished_rollout_of_the_revision_starts_its_run() -> None:
    assert decide(SVC, seen(), SETTINGS) == plan(start=Start(RUN, REV), rollout_done=True)


def test_no_run_starts_before_the_revision_is_rolled_out() -> None:
    waiting = plan(rollout_done=False)
    assert decide(SVC, Observed(deployment=None), SETTINGS) == waiting
    assert decide(SVC, seen(dep=deployment(ready=False)), SETTINGS) == waiting
    assert decide(SVC, seen(dep=deployment(replicas=0)), SETTINGS) == waiting
    # rolled out, but of another pod template (the new one is not applied yet)
    assert decide(SVC, seen(dep=deployment("0123456789")), SETTINGS) == waiting


def test_a_start_interrupted_before_the_job_is_resumed_once_rolled_out() -> None:
    going = (run(state="Running"),)
    assert decide(SVC, seen(going), SETTINGS) == plan(
        start=Start(RUN, REV, resume=True), rollout_done=True
    )
    assert decide(SVC, seen(going, dep=deployment(ready=False)), SETTINGS) == plan()


def test_a_run_going_is_left_alone() -> None:
    assert decide(SVC, seen((run(state="Running"),), (job(active=True),)), SETTINGS) == plan(
        rollout_done=True
    )


# ---- a run that ends without a result ------------------------------------------------------


def ended(message: str) -> Plan:
    return plan(
        record=(Record(RUN, REV, {"state": "Failed", "message": message}, unless_result=True),),
        rollout_done=True,
    )


def test_a_failed_job_fails_its_run_with_the_jobs_reason() -> None:
    failed = job(failed="BackoffLimitExceeded", message="Job has reached the backoff limit")
    assert decide(SVC, seen((run(state="Running"),), (failed,)), SETTINGS) == ended(
        "BackoffLimitExceeded: Job has reached the backoff limit"
    )


def test_a_job_past_its_deadline_fails_its_run_as_timed_out() -> None:
    late = job(failed="DeadlineExceeded", message="Job was active longer than specified")
    assert decide(SVC, seen((run(state="Running"),), (late,)), SETTINGS) == ended(
        "DeadlineExceeded: the benchmark ran past its deadline (1200s)"
    )


def test_a_job_that_succeeded_without_a_result_fails_its_run() -> None:
    assert decide(SVC, seen((run(state="Running"),), (job(succeeded=True),)), SETTINGS) == ended(
        f"NoResult: {NO_RESULT}"
    )


def test_a_run_with_its_result_is_not_ended_by_its_job() -> None:
    done = (run(state="Complete"),)
    assert decide(SVC, seen(done, (job(succeeded=True),)), SETTINGS) == plan(
        record=(verdict(PASSED),),
        failures=(),
        rollout_done=True,  # judged: no thresholds
    )


# ---- supersede -----------------------------------------------------------------------------


def superseded(name: str, rev: str) -> Record:
    return Record(name, rev, {"state": "Failed", "message": SUPERSEDED}, unless_result=True)


def test_a_run_of_an_older_revision_still_going_is_superseded() -> None:
    old = run("aaaaaaaaaa", state="Running", created="2030-01-01T00:01:00Z")
    assert decide(SVC, seen((old,), (job(old.name, active=True),)), SETTINGS) == plan(
        start=Start(RUN, REV),
        stop=(old.name,),
        record=(superseded(old.name, "aaaaaaaaaa"),),
        rollout_done=True,
    )


def test_never_the_current_run_a_finished_one_or_one_of_a_later_generation() -> None:
    published = run("aaaaaaaaaa", created="2030-01-01T00:01:00Z")  # Job not marked done yet
    newer = run("bbbbbbbbbb", state="Running", created="2030-01-01T00:02:00Z")
    jobs = (
        job(active=True),  # the current run
        job(published.name, active=True),
        job(newer.name, active=True, generation=2),  # started from generation 2: SVC is 1
    )
    current = run(state="Running", created="2030-01-01T00:03:00Z")
    assert decide(SVC, seen((published, newer, current), jobs), SETTINGS) == plan(rollout_done=True)


def test_a_new_rerun_token_supersedes_the_earlier_rerun_of_the_same_revision() -> None:
    first = SVC.model_copy(update={"rerun": "one"})
    second = SVC.model_copy(update={"rerun": "two"})
    earlier = run(name=run_name(first, REV), state="Running")
    name = run_name(second, REV)
    assert decide(second, seen((earlier,), (job(earlier.name, active=True),)), SETTINGS) == plan(
        run=name,
        start=Start(name, REV, "two"),
        stop=(earlier.name,),
        record=(superseded(earlier.name, REV),),
        rollout_done=True,
    )


# ---- verdicts and rollback -----------------------------------------------------------------


def verdict(verdict: str, failures: str = "") -> Record:
    return Record(RUN, REV, {"verdict": verdict, "verdictFailures": failures})


def test_a_new_result_that_meets_the_gates_is_recorded_passed() -> None:
    svc = with_spec({"benchmark": GATES})
    rev = revision(render_pod_template(svc, SETTINGS))
    assert rev == REV  # thresholds are not part of the revision
    assert decide(svc, seen((run(tps=60),)), SETTINGS) == plan(
        record=(verdict(PASSED),), failures=(), rollout_done=True
    )


def test_a_new_result_that_fails_the_gates_is_recorded_failed_and_reported() -> None:
    svc = with_spec({"benchmark": GATES})
    assert decide(svc, seen((run(tps=10),)), SETTINGS) == plan(
        record=(verdict(FAILED, "outputTokensPerSecond 10 < minimum 50"),),
        failures=("outputTokensPerSecond 10 < minimum 50",),
        rollout_done=True,
    )


def good() -> tuple[Service, Run]:
    """An earlier revision that passed, with its recorded spec."""
    old = with_spec({"engine": {"maxNumSeqs": 8}})
    old_rev = revision(render_pod_template(old, SETTINGS))
    spec_json = old.spec.model_dump_json(by_alias=True, exclude_none=True)
    return old, run(old_rev, verdict=PASSED, created="2030-01-01T00:01:00Z", spec_json=spec_json)


def confirmed_failure(tps: float = 12) -> tuple[Run, Run]:
    """The revision's first run judged Failed, and its confirmation judged Failed too."""
    failures = f"outputTokensPerSecond {tps:g} < minimum 50"
    second = dataclasses.replace(
        run(name=CONFIRM_RUN, tps=tps, verdict=FAILED, created="2030-01-01T00:06:00Z"),
        verdict_failures=failures,
    )
    return failed_first(), second


def test_a_failed_verdict_recorded_under_report_is_confirmed_before_a_rollback() -> None:
    """Issue 19, item 8: switching onFailure from Report to Rollback must not roll back at
    once on the one measurement Report recorded (no confirmation named in its record): a
    second run confirms it first, as for every other failure."""
    svc = with_spec(ROLLBACK)
    _, passed = good()
    reported = dataclasses.replace(failed_first(), confirmation="")
    assert decide(svc, seen((passed, reported)), SETTINGS) == plan(
        run=CONFIRM_RUN,
        start=Start(CONFIRM_RUN, REV, CONFIRM.rerun),
        record=(Record(RUN, REV, {"confirmation": CONFIRM_RUN}),),
        failures=(FIRST_FAILURES,),
        rollout_done=True,
        confirming=confirming_why(),
    )
    # under Report it stays reported, and nothing is confirmed
    svc = with_spec({"benchmark": {**GATES, "onFailure": "Report"}})
    assert decide(svc, seen((passed, reported)), SETTINGS) == plan(
        failures=(FIRST_FAILURES,), rollout_done=True
    )


def test_a_rollback_target_whose_recorded_spec_was_edited_is_refused() -> None:
    """The record's spec is not the text whose hash was recorded with the run, and it renders
    another revision: never deployed (not taken for a rendering of this operator's)."""
    svc = with_spec(ROLLBACK)
    _, passed = good()
    passed = dataclasses.replace(passed, spec_hash=spec_hash(passed.spec_json))
    planted = dataclasses.replace(
        passed, spec_json=with_spec({"image": "evil:1"}).spec.model_dump_json()
    )
    got = decide(svc, seen((planted, *confirmed_failure())), SETTINGS)
    assert got.restored is None
    assert got.rolled_back_to is None
    assert got.rollback_to == planted
    assert got.rollback_refused is not None
    assert got.rollback_refused.startswith(
        f"the record of revision {planted.revision} ({planted.name}-record) renders revision "
    )
    assert got.rollback_refused.endswith(
        f"and its spec is not the one recorded with the run (spec hash "
        f"{spec_hash(planted.spec_json)}, recorded {passed.spec_hash})"
    )


def test_tightened_thresholds_never_roll_back_a_revision_that_passed() -> None:
    svc = with_spec({"benchmark": {**GATES, "onFailure": "Rollback"}})
    _, passed = good()
    assert decide(svc, seen((passed, run(tps=10, verdict=PASSED))), SETTINGS) == plan(
        failures=("outputTokensPerSecond 10 < minimum 50",), rollout_done=True
    )


# ---- history -------------------------------------------------------------------------------


def short(name: str, verdict: str | None = None, state: str = "Complete") -> Run:
    return Run(name[0] * 10, name, f"t-{name}", state, "", verdict=verdict)


def test_pruning_always_keeps_the_last_passing_run_the_baseline_and_the_protected() -> None:
    """keepRuns 1: the rollback target and the regression baseline survive the next run."""
    a, b = short("a", PASSED), short("b", FAILED)
    assert runs_to_prune([a, b], "bbbbbbbbbb", "b", 1, set()) == []
    # c passed after a: c is both the last passing run and d's baseline
    c, d = short("c", PASSED), short("d", state="Running")
    assert runs_to_prune([a, b, c, d], "dddddddddd", "d", 1, set()) == [a, b]
    # the current revision passed itself: it is the last passing run; a is its baseline
    assert runs_to_prune([a, b, c], "cccccccccc", "c", 1, set()) == [b]
    # keepRuns counts every run: two kept runs here, so only the oldest extra one goes
    assert runs_to_prune([a, b, c, d], "dddddddddd", "d", 3, set()) == [a]
    assert runs_to_prune([a, b, c, d], "dddddddddd", "d", 1, {"b"}) == [a]


def test_the_plan_prunes_the_oldest_runs_beyond_keep_runs() -> None:
    svc = with_spec({"benchmark": {"keepRuns": 2}})
    old = tuple(
        run(rev * 10, created=f"2030-01-01T00:0{i}:00Z", verdict=FAILED)
        for i, rev in enumerate("abc", start=1)
    )
    current = run(state="Running", created="2030-01-01T00:09:00Z")
    got = decide(svc, seen((*old, current), (job(active=True),)), SETTINGS)
    assert got == plan(prune=(old[0].name, old[1].name), rollout_done=True)


# ---- a failed verdict is confirmed once before it rolls back (issue 10, item 7) -----------

ROLLBACK = {"benchmark": {**GATES, "onFailure": "Rollback"}}
CONFIRM = confirming(SVC)
CONFIRM_RUN = run_name(CONFIRM, REV)
FIRST_FAILURES = "outputTokensPerSecond 10 < minimum 50"


def failed_first() -> Run:
    """The revision's first run, judged Failed, naming the run that confirms it."""
    return dataclasses.replace(
        run(tps=10, verdict=FAILED, created="2030-01-01T00:05:00Z"),
        verdict_failures=FIRST_FAILURES,
        confirmation=CONFIRM_RUN,
    )


def confirming_why() -> str:
    return (
        f"run {RUN} failed its gates ({FIRST_FAILURES}); run {CONFIRM_RUN} measures revision "
        f"{REV} again before any rollback"
    )


def test_a_first_failed_verdict_starts_a_confirmation_run_instead_of_a_rollback() -> None:
    svc = with_spec(ROLLBACK)
    _, passed = good()
    assert CONFIRM_RUN not in (RUN, passed.name)
    assert decide(svc, seen((passed, run(tps=10))), SETTINGS) == plan(
        run=CONFIRM_RUN,
        start=Start(CONFIRM_RUN, REV, CONFIRM.rerun),
        record=(
            Record(
                RUN,
                REV,
                {
                    "verdict": FAILED,
                    "verdictFailures": FIRST_FAILURES,
                    "confirmation": CONFIRM_RUN,
                },
            ),
        ),
        failures=(FIRST_FAILURES,),
        rollout_done=True,
        confirming=confirming_why(),
    )


def test_while_the_confirmation_runs_nothing_is_rolled_back() -> None:
    svc = with_spec(ROLLBACK)
    _, passed = good()
    going = run(name=CONFIRM_RUN, state="Running", created="2030-01-01T00:06:00Z")
    got = decide(
        svc, seen((passed, failed_first(), going), (job(CONFIRM_RUN, active=True),)), SETTINGS
    )
    assert got == plan(
        run=CONFIRM_RUN,
        failures=(FIRST_FAILURES,),
        rollout_done=True,
        confirming=confirming_why(),
    )
    # an operator restart between its ConfigMaps and its Job: the confirmation resumes
    got = decide(svc, seen((passed, failed_first(), going)), SETTINGS)
    assert got.start == Start(CONFIRM_RUN, REV, CONFIRM.rerun, resume=True)
    # the first run's Job, finished, is never superseded; neither is the confirmation's
    assert got.stop == ()


def test_a_passing_confirmation_makes_the_revision_pass() -> None:
    svc = with_spec(ROLLBACK)
    _, passed = good()
    second = run(name=CONFIRM_RUN, tps=60, created="2030-01-01T00:06:00Z")
    assert decide(svc, seen((passed, failed_first(), second)), SETTINGS) == plan(
        run=CONFIRM_RUN,
        record=(Record(CONFIRM_RUN, REV, {"verdict": PASSED, "verdictFailures": ""}),),
        failures=(),
        rollout_done=True,
    )


def test_a_failing_confirmation_rolls_back() -> None:
    svc = with_spec(ROLLBACK)
    old, passed = good()
    second = run(name=CONFIRM_RUN, tps=12, created="2030-01-01T00:06:00Z")
    failures = "outputTokensPerSecond 12 < minimum 50"
    got = decide(svc, seen((passed, failed_first(), second)), SETTINGS)
    assert got == plan(
        run=CONFIRM_RUN,
        record=(Record(CONFIRM_RUN, REV, {"verdict": FAILED, "verdictFailures": failures}),),
        failures=(failures,),
        rollback_to=passed,
        restored=svc.model_copy(update={"spec": old.spec}),
        confirmed=True,
    )
    # once recorded, the next reconcile (the rollback in force) records nothing more
    second = dataclasses.replace(second, verdict=FAILED, verdict_failures=failures)
    again = decide(
        svc, seen((passed, failed_first(), second), dep=deployment(passed.revision)), SETTINGS
    )
    assert again == dataclasses.replace(got, record=())


def test_a_confirmation_that_ends_without_a_result_rolls_nothing_back() -> None:
    svc = with_spec(ROLLBACK)
    _, passed = good()
    going = run(name=CONFIRM_RUN, state="Running", created="2030-01-01T00:06:00Z")
    failed = job(CONFIRM_RUN, failed="BackoffLimitExceeded", message="exit 1")
    assert decide(svc, seen((passed, failed_first(), going), (failed,)), SETTINGS) == plan(
        run=CONFIRM_RUN,
        record=(
            Record(
                CONFIRM_RUN,
                REV,
                {"state": "Failed", "message": "BackoffLimitExceeded: exit 1"},
                unless_result=True,
            ),
        ),
        failures=(FIRST_FAILURES,),
        rollout_done=True,
        confirming=confirming_why(),
    )


def test_report_mode_does_not_confirm() -> None:
    svc = with_spec({"benchmark": {**GATES, "onFailure": "Report"}})
    (record,) = decide(svc, seen((run(tps=10),)), SETTINGS).record
    assert "confirmation" not in record.data


def test_pruning_keeps_both_runs_of_the_revision() -> None:
    svc = with_spec({"benchmark": {**GATES, "onFailure": "Rollback", "keepRuns": 1}})
    _, passed = good()
    second = run(name=CONFIRM_RUN, state="Running", created="2030-01-01T00:06:00Z")
    older = run("aaaaaaaaaa", verdict=FAILED, created="2030-01-01T00:00:30Z")
    got = decide(
        svc,
        seen((older, passed, failed_first(), second), (job(CONFIRM_RUN, active=True),)),
        SETTINGS,
    )
    assert got.prune == (older.name,)


# ---- a superseded run is no verdict: the revision is measured when it comes back -----------

REMEASURE = SVC.model_copy(update={"rerun": "#remeasure-1"})
REMEASURE_RUN = run_name(REMEASURE, REV)


def superseded_run(name: str = RUN) -> Run:
    return dataclasses.replace(
        run(name=name, state="Failed", created="2030-01-01T00:01:00Z"), message=SUPERSEDED
    )


def test_a_revision_whose_run_was_superseded_is_measured_again_when_it_comes_back() -> None:
    """Issue 19, item 6: the revision's run was stopped by a newer rollout before it finished;
    reverting to the revision starts a new run (it left BenchmarkFailed for good)."""
    assert REMEASURE_RUN not in (RUN, CONFIRM_RUN)
    assert decide(SVC, seen((superseded_run(),)), SETTINGS) == plan(
        run=REMEASURE_RUN, start=Start(REMEASURE_RUN, REV, "#remeasure-1"), rollout_done=True
    )
    # that run is the current one from then on: judged once complete, never a third one
    done = run(name=REMEASURE_RUN, created="2030-01-01T00:09:00Z")
    assert decide(SVC, seen((superseded_run(), done)), SETTINGS) == plan(
        run=REMEASURE_RUN,
        record=(Record(REMEASURE_RUN, REV, {"verdict": PASSED, "verdictFailures": ""}),),
        failures=(),
        rollout_done=True,
    )
    # superseded again: the next one; and the superseded one pruned away changes nothing
    again = dataclasses.replace(superseded_run(REMEASURE_RUN), created="2030-01-01T00:09:00Z")
    third = run_name(SVC.model_copy(update={"rerun": "#remeasure-2"}), REV)
    assert decide(SVC, seen((superseded_run(), again)), SETTINGS).start == Start(
        third, REV, "#remeasure-2"
    )
    assert decide(SVC, seen((done,)), SETTINGS).run == REMEASURE_RUN


def test_a_run_that_failed_otherwise_stays_the_revisions_verdict() -> None:
    failed = dataclasses.replace(superseded_run(), message="BackoffLimitExceeded: exit 1")
    assert decide(SVC, seen((failed,)), SETTINGS) == plan(rollout_done=True)


# ---- the rollback target is what served before the failing revision (issue 19, item 5) -----


def test_a_run_records_what_served_before_and_its_failure_restores_that() -> None:
    dep = deployment()
    dep["metadata"]["annotations"]["serving.vllm-operator.dev/previous-revision"] = "aaaaaaaaaa"
    assert decide(SVC, seen(dep=dep), SETTINGS).start == Start(RUN, REV, served_before="aaaaaaaaaa")
    # A (older) and B (newer) passed; A served again before this revision: A is restored
    svc = with_spec(ROLLBACK)
    old, a = good()
    b = run("bbbbbbbbbb", verdict=PASSED, created="2030-01-01T00:03:00Z")
    first, second = confirmed_failure()
    first = dataclasses.replace(first, served_before=a.revision)
    got = decide(svc, seen((a, b, first, second), dep=deployment(a.revision)), SETTINGS)
    assert got.rollback_to == a
    assert got.restored == svc.model_copy(update={"spec": old.spec})
    # before the record says so (runs of an earlier version): the newest passing run
    got = decide(svc, seen((a, b, *confirmed_failure())), SETTINGS)
    assert got.rollback_to == b


def test_the_deployment_names_the_revision_rolled_out_before_its_own() -> None:
    """observed.previous_revision: what a failure of the revision rolls back to (issue 19,
    item 5); a rollout that never finished served nothing, and a resync changes nothing."""
    served = deployment("aaaaaaaaaa")
    assert previous_revision(served, REV) == "aaaaaaaaaa"
    assert previous_revision(served, "aaaaaaaaaa") == ""  # a resync: nothing known yet
    served["metadata"]["annotations"][PREVIOUS_REVISION_ANNOTATION] = "bbbbbbbbbb"
    assert previous_revision(served, "aaaaaaaaaa") == "bbbbbbbbbb"  # a resync keeps it
    assert previous_revision(served, REV) == "aaaaaaaaaa"
    halfway = deployment("aaaaaaaaaa", ready=False)  # its rollout had not finished
    halfway["metadata"]["annotations"][PREVIOUS_REVISION_ANNOTATION] = "bbbbbbbbbb"
    assert previous_revision(halfway, REV) == "bbbbbbbbbb"
    assert previous_revision(halfway, "bbbbbbbbbb") == ""  # never itself
    assert previous_revision(None, REV) == ""


# ---- an operator that renders pod templates differently (issue 19, item 2) -----------------

# the next release, or another default image in the operator's settings: every pod template
# of the minimal sample (a GPU service without spec.image) renders another revision
UPGRADED = OperatorSettings(gpu_image="vllm/vllm-openai:v0.33.0")
REV_NOW = revision(render_pod_template(SVC, UPGRADED))
RUN_NOW = run_name(SVC, REV_NOW)
ROLLBACK_JSON = with_spec(ROLLBACK).spec.model_dump_json(by_alias=True, exclude_none=True)


def measured_before(**changes: Any) -> tuple[Run, Run]:
    """The spec's two failed runs under the earlier rendering (REV), with its spec."""
    return tuple(  # type: ignore[return-value]
        dataclasses.replace(r, spec_json=ROLLBACK_JSON, **changes) for r in confirmed_failure()
    )


def test_the_earlier_renderings_of_the_spec_are_its_failed_runs_of_other_revisions() -> None:
    svc = with_spec(ROLLBACK)
    _, passed = good()
    first, second = measured_before()
    assert REV_NOW != REV
    runs = (passed, first, second)
    assert earlier_renderings(svc, runs, UPGRADED, REV_NOW) == [REV]
    # not the revision itself; not with the settings that rendered it: nothing changed
    assert earlier_renderings(svc, runs, SETTINGS, REV) == []
    # another spec's failed runs, a run without a spec or one that does not parse: no
    other = with_spec({"engine": {"maxNumSeqs": 4}})
    other_now = revision(render_pod_template(other, UPGRADED))
    assert earlier_renderings(other, runs, UPGRADED, other_now) == []
    bare = tuple(dataclasses.replace(r, spec_json="") for r in (first, second))
    assert earlier_renderings(svc, bare, UPGRADED, REV_NOW) == []
    broken = tuple(dataclasses.replace(r, spec_json="{") for r in (first, second))
    assert earlier_renderings(svc, broken, UPGRADED, REV_NOW) == []
    # a passed run is no earlier rendering that failed
    passed_here = dataclasses.replace(passed, spec_json=ROLLBACK_JSON, revision="cccccccccc")
    assert earlier_renderings(svc, (passed_here,), UPGRADED, REV_NOW) == []
    # newest first, each revision once
    older = dataclasses.replace(first, revision="dddddddddd", created="2030-01-01T00:00:30Z")
    assert earlier_renderings(svc, (older, first, second), UPGRADED, REV_NOW) == [
        REV,
        "dddddddddd",
    ]


def test_a_rollback_stays_in_force_when_the_failed_spec_renders_another_revision() -> None:
    """The spec failed in two runs as REV, A was restored; this operator renders the spec as
    REV_NOW and A's recorded spec anew: A's spec as rendered now is restored, nothing starts,
    and the plan says what renders differently."""
    svc = with_spec(ROLLBACK)
    old, passed = good()
    first, second = measured_before()
    a_now = revision(render_pod_template(old, UPGRADED))
    got = decide(svc, seen((passed, first, second), dep=deployment(passed.revision)), UPGRADED)
    assert got == plan(
        run=CONFIRM_RUN,
        failures=("outputTokensPerSecond 12 < minimum 50",),
        rollback_to=passed,
        restored=svc.model_copy(update={"spec": old.spec}),
        confirmed=True,
        rendered_as=REV_NOW,
        restored_as=a_now,
    )
    assert got.rolled_back_to == passed.revision
    # with the settings that measured it: the plan of before, nothing rendered anew
    assert decide(svc, seen((passed, first, second)), SETTINGS) == dataclasses.replace(
        got, rendered_as="", restored_as=""
    )


def test_a_target_rendered_anew_is_restored_for_a_spec_measured_now() -> None:
    """A passed under the earlier rendering; the spec fails in two runs as this operator
    renders it (REV_NOW): A's recorded spec renders another revision now, and is restored."""
    svc = with_spec(ROLLBACK)
    old, passed = good()
    confirm_now = run_name(CONFIRM, REV_NOW)
    first = dataclasses.replace(
        failed_first(), revision=REV_NOW, name=RUN_NOW, confirmation=confirm_now
    )
    second = dataclasses.replace(
        confirmed_failure()[1], revision=REV_NOW, name=confirm_now, spec_json=ROLLBACK_JSON
    )
    got = decide(svc, seen((passed, first, second), dep=deployment(REV_NOW)), UPGRADED)
    assert got == plan(
        revision=REV_NOW,
        run=confirm_now,
        failures=("outputTokensPerSecond 12 < minimum 50",),
        rollback_to=passed,
        restored=svc.model_copy(update={"spec": old.spec}),
        confirmed=True,
        restored_as=revision(render_pod_template(old, UPGRADED)),
    )


def test_the_spec_rendered_anew_is_measured_where_no_rollback_is_in_force() -> None:
    """No confirmed failure with a target to keep: the new rendering rolls out and is
    measured, as every rollout (the first run names it, once rolled out)."""
    svc = with_spec(ROLLBACK)
    _, passed = good()
    first, second = measured_before()
    dep = deployment(REV_NOW)
    measure_now = plan(
        revision=REV_NOW, run=RUN_NOW, start=Start(RUN_NOW, REV_NOW), rollout_done=True
    )
    # the target's record holds no spec (a refused rollback: nothing is in force)
    bare = dataclasses.replace(passed, spec_json="")
    assert decide(svc, seen((bare, first, second), dep=dep), UPGRADED) == measure_now
    # under Report nothing is ever rolled back
    report = with_spec({"benchmark": {**GATES, "onFailure": "Report"}})
    assert decide(report, seen((passed, first, second), dep=dep), UPGRADED) == measure_now
    # the spec passed as REV: it is measured as rendered now
    ok = dataclasses.replace(first, verdict=PASSED)
    assert decide(svc, seen((passed, ok), dep=dep), UPGRADED) == measure_now
    # only its first run failed (its confirmation was stopped by the new rollout)
    assert decide(svc, seen((passed, first), dep=dep), UPGRADED).start == Start(RUN_NOW, REV_NOW)


def test_the_rerun_annotation_or_a_run_of_the_new_rendering_ends_it() -> None:
    svc = with_spec(ROLLBACK)
    _, passed = good()
    first, second = measured_before()
    dep = deployment(REV_NOW)
    # a new rerun token: its runs of REV do not exist; the spec is measured as rendered now
    rerun = svc.model_copy(update={"rerun": "again"})
    named = run_name(rerun, REV_NOW)
    got = decide(rerun, seen((passed, first, second), dep=dep), UPGRADED)
    assert (got.revision, got.start, got.rolled_back_to, got.rendered_as) == (
        REV_NOW,
        Start(named, REV_NOW, "again"),
        None,
        "",
    )
    # once the new rendering has a run (measured since), its runs decide
    now = run(REV_NOW, name=RUN_NOW, tps=60, verdict=PASSED, created="2030-01-01T00:07:00Z")
    got = decide(svc, seen((passed, first, second, now), dep=dep), UPGRADED)
    assert (got.revision, got.run, got.failures, got.rolled_back_to) == (REV_NOW, RUN_NOW, (), None)
