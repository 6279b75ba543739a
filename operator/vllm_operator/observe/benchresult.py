"""Part of the "observe" step: the benchmark Job's ConfigMap (the Job's word: its state, its
message and its result.json) parsed into a small validated model before any decision reads
it (pure: no client here).

What the benchmark pod writes is input, like a spec: a headline value that is not a number
would crash the gates (the decision step, before anything is applied: a frozen status and no
Event), and a state outside the CRD's enum, or a number of the wrong type, would make every
status write fail with 422. So the keys the operator reads are checked here, once, against
the types the status schema (status_schema.BenchmarkStatus) declares: an invalid ConfigMap becomes a
Failed run whose message names the key and the bad value (`InvalidResult: ...`), reported
as BenchmarkFailed with a Warning Event, never an exception. Keys the operator does not read
(the scenarios, raw samples, keys of a newer runner) are not checked: result.json stays the
runner's document (its own schema: vllm_bench/schema/result.schema.json).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator
from pydantic.alias_generators import to_camel

from vllm_operator import GROUP
from vllm_operator.api.records import HEADLINE_COUNTS, HEADLINE_KEYS
from vllm_operator.render.benchmark import COMPONENT, MESSAGE_KEY, RESULT_KEY, STATE_KEY

# the CRD's enum of status.benchmark.state (status_schema.BenchmarkStatus.state)
RUN_STATES = ("Running", "Complete", "Failed")
INVALID_RESULT = "InvalidResult"
# the status carries the message (a condition's, at most 32 KiB): the Job's is cut to this
MAX_MESSAGE_CHARS = 2048
_MAX_VALUE_CHARS = 80

# JSON numbers only (not "12", not true, not NaN or Infinity), as the status schema types them
Number = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)]
Text = Annotated[str, Field(strict=True)]


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", alias_generator=to_camel)


# result.json's `headline`: what the gates, the status and the printer columns read, built from
# the one list of its keys (api/records.HEADLINE_KEYS), each typed as the status schema types it
_HEADLINE_FIELDS: dict[str, Any] = {
    name: ((Count if name in HEADLINE_COUNTS else Number) | None, Field(default=None, alias=key))
    for name, key in HEADLINE_KEYS.items()
}
if TYPE_CHECKING:  # (a model built at run time: to the type checker, a part like the others)
    ResultHeadline = _Part
else:
    ResultHeadline = create_model("ResultHeadline", __base__=_Part, **_HEADLINE_FIELDS)


class ResultLiveLoad(_Part):
    """result.json's `liveLoad`, the figures status.benchmark.liveLoad shows."""

    foreign_requests: Count | None = None
    peak_foreign_in_flight: Number | None = None
    quiet: Annotated[bool, Field(strict=True)] | None = None


class ResultError(_Part):
    scenario: Text | None = None
    message: Text | None = None


class ResultLadderPoint(_Part):
    """One level of the batching ladder: what a latency objective is judged on
    (decide/capacity.py)."""

    concurrency: Count
    requests_per_second: Number | None = None
    output_tokens_per_second: Number | None = None
    prompt_tokens_mean: Number | None = None
    ttft_p50_seconds: Number | None = None
    ttft_p90_seconds: Number | None = None
    ttft_p95_seconds: Number | None = None
    ttft_p99_seconds: Number | None = None
    tpot_p50_seconds: Number | None = None
    tpot_p90_seconds: Number | None = None
    tpot_p95_seconds: Number | None = None
    tpot_p99_seconds: Number | None = None


class ResultBatchingSummary(_Part):
    ladder: list[ResultLadderPoint] | None = None


class ResultBatching(_Part):
    summary: ResultBatchingSummary | None = None


class ResultScenarios(_Part):
    batching: ResultBatching | None = None


class ResultConfig(_Part):
    """The workload the run sent (the runner's settings)."""

    input_tokens: Count | None = None
    output_tokens: Count | None = None


class ResultDocument(_Part):
    """The keys of result.json the operator reads."""

    status: Text | None = None  # ok, partial, failed
    finished_at: Text | None = None
    headline: ResultHeadline | None = None
    live_load: ResultLiveLoad | None = None
    errors: list[ResultError] | None = None
    # the batching ladder and the workload it sent: a latency objective's capacity
    scenarios: ResultScenarios | None = None
    config: ResultConfig | None = None

    @field_validator("scenarios", "config", mode="before")
    @classmethod
    def _only_objects(cls, value: object) -> object:
        """Another runner's shape of these (not the object keyed by scenario name) is not
        read: no capacity, rather than a failed run."""
        return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class JobReport:
    """A run's state, message and result, as the Job's ConfigMap holds them, validated:
    `state` is one of RUN_STATES; `result` is None unless it is a valid result document."""

    state: str
    message: str
    result: dict[str, Any] | None = None


def _value(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 3] + "..."


def invalid(error: ValidationError, key: str) -> str:
    """The first thing wrong, as `InvalidResult: <key> <path> is <value>: <why>`."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{INVALID_RESULT}: {key} {where} is {_value(first['input'])}: {first['msg']}"


def clip(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 3] + "..."


def _parse(text: str) -> tuple[dict[str, Any], ResultDocument] | str:
    """result.json as (the document, the keys the operator reads), or what is wrong with it."""
    try:
        result = json.loads(text)
    except (TypeError, ValueError) as exc:
        return f"{INVALID_RESULT}: {RESULT_KEY} is not valid JSON ({exc})"
    if not isinstance(result, dict):
        return f"{INVALID_RESULT}: {RESULT_KEY} is not a JSON object"
    try:
        return result, ResultDocument.model_validate(result)
    except ValidationError as exc:
        return clip(invalid(exc, RESULT_KEY))


def read_job_report(data: dict[str, Any]) -> JobReport:
    """The Job's ConfigMap `data` as a JobReport (never an exception: what is wrong in it
    fails the run, and the message says which key holds which bad value)."""
    state, message = data.get(STATE_KEY, "Running"), data.get(MESSAGE_KEY, "")
    message = clip(message if isinstance(message, str) else _value(message))
    if state not in RUN_STATES:
        allowed = ", ".join(RUN_STATES)
        why = f"{INVALID_RESULT}: {STATE_KEY} is {_value(state)}, not one of {allowed}"
        return JobReport("Failed", why)
    if RESULT_KEY not in data:
        if state == "Complete":
            return JobReport(
                "Failed", f"{INVALID_RESULT}: {STATE_KEY} is Complete without {RESULT_KEY}"
            )
        return JobReport(state, message)
    parsed = _parse(data[RESULT_KEY])
    if isinstance(parsed, str):
        return JobReport("Failed", parsed)
    result, document = parsed
    if state == "Running":
        state = "Complete" if document.status in ("ok", "partial") else "Failed"
    return JobReport(state, message or clip(_runner_errors(document)), result)


def _runner_errors(document: ResultDocument) -> str:
    return "; ".join(f"{e.scenario}: {e.message}" for e in (document.errors or [])[:3])


# In the run's record (the operator's own, small ConfigMap): the run's report as first seen
# finished, with only the keys of its result the operator reads. A run is summarized once;
# from then on every reconcile reads the summary, never the result again (a result is up to
# ~900 KB, and the watch cache does not hold it: informer.TRIMMED).
SUMMARY_KEY = "summary.json"
# on a Job's ConfigMap as the watch cache holds it: its result.json was left out (the cache
# keeps the small keys: state, message); a reader that needs the result GETs the ConfigMap
LEFT_OUT_ANNOTATION = f"{GROUP}/left-out-of-cache"


def trim(configmap: dict[str, Any]) -> dict[str, Any]:
    """A Job's ConfigMap as the watch cache keeps it: without its result (in place). Every
    other object, the run's record included, is kept whole."""
    labels = configmap.get("metadata", {}).get("labels") or {}
    data = configmap.get("data") or {}
    if labels.get("app.kubernetes.io/component") == COMPONENT and RESULT_KEY in data:
        del data[RESULT_KEY]
        annotations = configmap["metadata"].get("annotations") or {}
        configmap["metadata"]["annotations"] = annotations | {LEFT_OUT_ANNOTATION: RESULT_KEY}
    return configmap


def left_out(configmap: dict[str, Any]) -> bool:
    """Whether the watch cache left this ConfigMap's result out (trim)."""
    annotations = configmap.get("metadata", {}).get("annotations") or {}
    return annotations.get(LEFT_OUT_ANNOTATION) == RESULT_KEY


class _Summary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    state: Text
    message: Text
    created: Text = ""
    result: ResultDocument | None = None


def brief(report: JobReport) -> JobReport:
    """The report with its result cut to the keys the operator reads (ResultDocument, the
    runner's errors aside: the message already quotes them)."""
    if report.result is None:
        return report
    document = ResultDocument.model_validate(report.result)
    slim = document.model_dump(by_alias=True, exclude_none=True, exclude={"errors"})
    return JobReport(report.state, report.message, slim)


def summarize(report: JobReport, created: str) -> str:
    """The summary of a run (`created`: its ConfigMap's creationTimestamp, the history's
    order), as the record keeps it."""
    body = {"state": report.state, "message": report.message, "created": created}
    return json.dumps(body | {"result": brief(report).result}, separators=(",", ":"))


def read_summary(text: str) -> tuple[JobReport, str] | None:
    """A record's summary as (the report, the run's creationTimestamp); None when the record
    has none, or one that is not a summary (then the run's result is read again)."""
    try:
        summary = _Summary.model_validate_json(text)
    except ValidationError:
        return None
    if summary.state not in RUN_STATES:
        return None
    result = summary.result.model_dump(by_alias=True, exclude_none=True) if summary.result else None
    return JobReport(summary.state, clip(summary.message), result), summary.created
