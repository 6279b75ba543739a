"""Part of the "decide" step: the verdict of a canary's bake on live traffic
(rollout.canary.bake), a pure function of the spec's limits and what observe() read.

    judge_bake(limits, bake) -> BakeVerdict

The canary serves beside the stable pods (it joined the Service's endpoints when its
EndpointSlice was created); Prometheus's figures over that window are compared:

- Failed, as soon as the canary answered `minRequests` and its TTFT p99 or inter-token p99
  exceeds the stable pods' times the limit at the histogram's resolution (the bucket that holds
  the canary's p99 lies wholly above the limit: vLLM's TTFT buckets jump from 100 to 250 ms, so
  a few requests past 100 ms make an interpolated p99 of 220 ms out of 100; such an excess is
  shown in the status and decides nothing), or its 5xx share exceeds theirs by more than
  `maxErrorRateIncrease` (an abort need not wait for the window's end: the detection time),
  on figures of the bake alone: while Prometheus's shortest window (four scrape intervals)
  still reaches back before the bake began (the canary's benchmark run, its start), the
  figures are shown and decide nothing; and worse twice: over the whole bake and over its most
  recent half (a spike that is over, the canary's first seconds on live traffic, is in the
  whole window only; a regression is in both), so the earliest abort comes once that half is
  a window of its own (two shortest windows into the bake);
- Failed, too, when it stopped answering: it answered `minRequests` before the bake's most
  recent half and none in it while the stable pods still answered theirs (a hung canary);
  and at the window's end when it was worse over the whole bake and the recent half has no
  sample of it (no sample confirms nothing: it is not "not worse");
- Failed, at once, when the canary's pod in the bake goes (deleted, evicted, drained,
  replaced), is not Ready, or a container of it restarts: it took live traffic and cut it;
- Passed, at the window's end, when nothing failed;
- Inconclusive, at the window's end, when the canary answered fewer than `minRequests` (no
  traffic: nothing to compare; `whenInconclusive` decides: Wait, Promote or Abort).

"Answered" counts a request that finished (vLLM's count) or got an HTTP response (the API
server's count), whichever is more: a canary that answers every request with a 5xx finishes
none, and is compared (and fails) on its 5xx share all the same.
- None (still baking) before the window's end, or while the figures cannot be read (the
  status says why; the promote and abort annotations decide by hand meanwhile).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from vllm_operator.api.spec import BakeSpec
from vllm_operator.observe.state import Bake, LiveFigures

# the bake's verdicts (the gates' are decide/gates.py PASSED and FAILED: the same words)
BAKE_PASSED, BAKE_FAILED = "Passed", "Failed"
BAKE_INCONCLUSIVE, BAKE_SKIPPED = "Inconclusive", "Skipped"


@dataclass(frozen=True)
class BakeVerdict:
    verdict: str | None  # a BAKE_* verdict above; None: still baking
    message: str


def _ms(seconds: float | None) -> str:
    return "no sample" if seconds is None else f"{seconds * 1000:.0f} ms"


def figures(canary: LiveFigures, stable: LiveFigures | None) -> str:
    """The figures compared, in words."""
    s = stable
    return (
        f"canary {canary.requests:.0f} requests, TTFT p99 {_ms(canary.ttft_p99)}, inter-token "
        f"p99 {_ms(canary.itl_p99)}, errors {canary.error_rate:.1%}; stable "
        + (
            f"TTFT p99 {_ms(s.ttft_p99)}, inter-token p99 {_ms(s.itl_p99)}, errors "
            f"{s.error_rate:.1%}"
            if s is not None
            else "no figures"
        )
    )


def _compare(
    limits: BakeSpec,
    canary: LiveFigures,
    stable: LiveFigures,
    *,
    latency: bool = True,
    errors: bool = True,
) -> tuple[list[str], list[str]]:
    """What is worse beyond the limits, and what exceeds a limit within the histogram's
    resolution only (the bucket holding the canary's p99 reaches below the limit); `latency`,
    `errors`: whether the canary answered enough of each kind for that comparison to count."""
    out: list[str] = []
    unresolved: list[str] = []
    for name, c, floor, s, ratio in (
        (
            "TTFT p99",
            canary.ttft_p99,
            canary.ttft_p99_floor,
            stable.ttft_p99,
            limits.max_ttft_p99_ratio,
        ),
        (
            "inter-token latency p99",
            canary.itl_p99,
            canary.itl_p99_floor,
            stable.itl_p99,
            limits.max_inter_token_p99_ratio,
        ),
    ):
        if not latency or c is None or s is None or c <= s * ratio:
            continue
        if floor is not None and floor < s * ratio:
            unresolved.append(
                f"{name} {_ms(c)} above {ratio:g} x the stable pods' {_ms(s)}, within the "
                f"histogram's bucket from {_ms(floor)}"
            )
        else:
            out.append(f"{name} {_ms(c)} > {ratio:g} x the stable pods' {_ms(s)}")
    increase = canary.error_rate - stable.error_rate
    if errors and increase > limits.max_error_rate_increase:
        out.append(
            f"5xx share {canary.error_rate:.1%} against the stable pods' "
            f"{stable.error_rate:.1%} (more than {limits.max_error_rate_increase:.1%} worse)"
        )
    return out, unresolved


NO_FIGURES = LiveFigures(requests=0, http_requests=0, http_errors=0, ttft_p99=None, itl_p99=None)


def answered(f: LiveFigures) -> float:
    """Requests a set of pods answered: those that finished (vLLM's count) or got an HTTP
    response (the API server's), whichever is more: a 5xx never finishes, yet it was answered."""
    return max(f.requests, f.http_requests)


def _stopped(limits: BakeSpec, bake: Bake) -> str:
    """Why the canary stopped answering in the most recent half of the bake ("": it did not):
    it answered minRequests before that half and none in it, while the stable pods still
    answered at least minRequests and at least half as many as before (the traffic goes on: an
    even spread over the endpoints gives the canary about its earlier share again; none of
    minRequests or more by chance is a chance of e^-minRequests/2)."""
    c, s, rc, rs = bake.canary, bake.stable, bake.recent_canary, bake.recent_stable
    if c is None or s is None or rc is None or rs is None or answered(rc) > 0:
        return ""
    canary_before = answered(c) - answered(rc)
    stable_before = answered(s) - answered(rs)
    if canary_before < limits.min_requests or answered(rs) < max(
        limits.min_requests, stable_before / 2
    ):
        return ""
    return (
        f"stopped answering: 0 requests in the bake's most recent half (the canary had "
        f"answered {canary_before:.0f} before it; the stable pods answered {answered(rs):.0f} "
        "in it)"
    )


def ends_at(bake: Bake, seconds: float) -> str:
    """The time `seconds` after the bake began (when the operator put the canary in the
    endpoints, on its own clock: status.rollout.bake.startedAt), as the status writes times
    ("": not known). A time, not a countdown: the message and the status stay the same from
    one reconcile to the next while the figures do, so a baking service's reconcile writes no
    status unless a figure a user reads changed."""
    try:
        start = dt.datetime.fromisoformat(bake.started.replace("Z", "+00:00"))
    except ValueError:
        return ""
    return (start + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _at(bake: Bake, seconds: float) -> str:
    return ends_at(bake, seconds) or f"{max(0, int(seconds - bake.elapsed))} s from now"


def _unread(limits: BakeSpec, bake: Bake) -> BakeVerdict | None:
    """The verdict before any figure is looked at (None: the figures decide)."""
    if bake.pod_problem:  # it stopped serving its share of the live traffic: cut streams
        return BakeVerdict(
            BAKE_FAILED,
            f"its pod stopped serving during the bake after {bake.elapsed:.0f} s: "
            f"{bake.pod_problem}",
        )
    if bake.error:
        return BakeVerdict(
            None,
            f"baking on live traffic until {_at(bake, limits.seconds)}: no figures: {bake.error}",
        )
    return None


def judge_bake(limits: BakeSpec, bake: Bake) -> BakeVerdict:
    if (unread := _unread(limits, bake)) is not None:
        return unread
    canary = bake.canary
    assert canary is not None  # (read together with the error: one of them is set)
    # no stable figures: none to compare latency with, and a 5xx share of 0 to compare errors
    stable = bake.stable if bake.stable is not None else NO_FIGURES
    # enough finished requests for the latency figures, enough HTTP responses for the 5xx share
    counts = {
        "latency": canary.requests >= limits.min_requests,
        "errors": canary.http_requests >= limits.min_requests,
    }
    enough = any(counts.values())
    before = bake.window - bake.elapsed > 1  # the figures reach back before the bake
    ended = bake.elapsed >= limits.seconds  # (a window shorter than the shortest: judged then)
    unconfirmed = ""
    if enough and (not before or ended):
        if stopped := _stopped(limits, bake):
            return BakeVerdict(
                BAKE_FAILED,
                f"worse than the stable pods on live traffic after {bake.elapsed:.0f} s: {stopped}",
            )
        worse, unresolved = _compare(limits, canary, stable, **counts)
        if unresolved:
            unconfirmed = " (not decisive: " + "; ".join(unresolved) + ")"
        # the most recent half, once read; a half in which the canary answered nothing shows
        # no sample, which is not "not worse": it confirms nothing either way (judged at the
        # window's end on the whole bake)
        rc = bake.recent_canary
        recent = (
            _compare(limits, rc, bake.recent_stable or NO_FIGURES, **counts)[0]
            if rc is not None and answered(rc) > 0
            else None
        )
        if worse and (recent or (recent is None and ended)):
            return BakeVerdict(
                BAKE_FAILED,
                f"worse than the stable pods on live traffic after {bake.elapsed:.0f} s "
                "(over the whole bake"
                + (" and its most recent half" if recent else "")
                + "): "
                + "; ".join(worse),
            )
        if worse:
            unconfirmed += (
                " (worse over the whole bake: "
                + "; ".join(worse)
                + (
                    ", not over its most recent half: a spike that is over"
                    if recent is not None
                    else ", to be confirmed over its most recent half"
                )
                + ")"
            )
    if not ended:
        reach = (
            " (these reach back before the bake: they decide nothing "
            f"until {_at(bake, bake.window)})"
            if before
            else ""
        )
        return BakeVerdict(
            None,
            f"baking on live traffic beside the stable pods until {_at(bake, limits.seconds)}: "
            + figures(canary, stable)
            + reach
            + unconfirmed,
        )
    if not enough:
        return BakeVerdict(
            BAKE_INCONCLUSIVE,
            f"the bake's {limits.seconds} s ended with {answered(canary):.0f} requests to the "
            f"canary (fewer than minRequests {limits.min_requests}): nothing to compare",
        )
    return BakeVerdict(
        BAKE_PASSED,
        f"as good as the stable pods over {limits.seconds} s: "
        + figures(canary, stable)
        + unconfirmed,
    )


def too_exposed(limits: BakeSpec, ready: int) -> BakeVerdict | None:
    """SKIPPED where the canary, one endpoint beside `ready` serving pods, would take more of
    the live traffic than bake.maxTrafficShare allows (kube-proxy spreads connections evenly
    over endpoints: 1/(ready+1)); None: the bake may begin."""
    share = 1 / (max(ready, 0) + 1)
    if share <= limits.max_traffic_share + 1e-9:
        return None
    needed = math.ceil(1 / limits.max_traffic_share - 1 - 1e-9)
    return BakeVerdict(
        BAKE_SKIPPED,
        f"its bake was skipped: beside {ready} Ready serving pod{'' if ready == 1 else 's'} "
        f"the canary would take about {share:.0%} of live traffic, above bake.maxTrafficShare "
        f"{limits.max_traffic_share:g} (it needs {needed} or more); promoted on its benchmark "
        "alone, never seen on live traffic",
    )


__all__ = [
    "BAKE_FAILED",
    "BAKE_INCONCLUSIVE",
    "BAKE_PASSED",
    "BAKE_SKIPPED",
    "BakeVerdict",
    "answered",
    "ends_at",
    "figures",
    "judge_bake",
    "too_exposed",
]
