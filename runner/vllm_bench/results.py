"""The result document (schemaVersion "2"; 2 made config.maxRps nullable and added rounds,
spread, warm-up and the knee headline): built from what the runner measured, checked
against schema/result.schema.json, written as result.json.

The operator reads `status`, `headline` and the scenario summaries from it; the keys are
camelCase and documented in the schema. Every raw sample stays in the document, so plots and
new summaries can be made later from result.json alone.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from vllm_bench import SCHEMA_VERSION
from vllm_bench.client import BenchError

SCHEMA_PATH = Path(__file__).with_name("schema") / "result.schema.json"
RESULT_FILE = "result.json"

# headline key -> (scenario, summary key): the numbers a status line or a dashboard shows
HEADLINE = {
    "kvCacheTokens": ("capacity", "kvCacheTokens"),
    "maxConcurrencyAtMaxModelLen": ("capacity", "maxConcurrencyAtMaxModelLen"),
    # at the ladder's knee (where throughput saturates), not at a fixed number of requests
    "outputTokensPerSecond": ("batching", "kneeOutputTokensPerSecond"),
    "outputTokensPerSecondConcurrency": ("batching", "kneeConcurrency"),
    "batchingSpeedup": ("batching", "speedupOverSerial"),
    "prefixTtftSpeedup": ("prefix", "ttftSpeedup"),
    "prefixHitRate": ("prefix", "hitRate"),
    "ttftP50Seconds": ("streaming", "ttftP50Seconds"),
    "ttftP95Seconds": ("streaming", "ttftP95Seconds"),
    # how long a request took under concurrent load: what a stopping pod's drain must cover
    "requestLatencyP99Seconds": ("batching", "latencyP99Seconds"),
}

# how the CLI exits for the first error of each kind (docs/benchmark-runner.md: exit codes)
EXIT_USAGE, EXIT_SERVER, EXIT_MODEL_MISMATCH, EXIT_INTERNAL = 2, 3, 4, 1


def rfc3339(timestamp: float) -> str:
    return (
        datetime.fromtimestamp(timestamp, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def error_record(scenario: str, error: BenchError) -> dict[str, str]:
    return {"scenario": scenario, "kind": error.kind, "message": error.message}


def headline(scenarios: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers that were measured (a key is absent when its scenario did not
    produce it)."""
    out = {}
    for key, (scenario, summary_key) in HEADLINE.items():
        value = scenarios.get(scenario, {}).get("summary", {}).get(summary_key)
        if value is not None:
            out[key] = value
    return out


def run_status(scenarios: dict[str, Any], errors: list[dict[str, str]]) -> str:
    """ok: every scenario ran without error; partial: some did; failed: none did."""
    if not errors:
        return "ok"
    failed = {e["scenario"] for e in errors}
    return "partial" if any(name not in failed for name in scenarios) else "failed"


def exit_code(errors: list[dict[str, str]]) -> int:
    kinds = {e["kind"] for e in errors}
    if "usage" in kinds:
        return EXIT_USAGE
    if "model-mismatch" in kinds:
        return EXIT_MODEL_MISMATCH
    if kinds - {"internal", "skipped"}:
        return EXIT_SERVER
    return EXIT_INTERNAL if kinds else 0


def build_document(
    *,
    config: dict[str, Any],
    environment: dict[str, Any],
    scenarios: dict[str, Any],
    errors: list[dict[str, str]],
    started_at: float,
    finished_at: float,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "schemaVersion": SCHEMA_VERSION,
        "status": run_status(scenarios, errors),
        "startedAt": rfc3339(started_at),
        "finishedAt": rfc3339(finished_at),
        "durationSeconds": round(finished_at - started_at, 3),
        "config": config,
        "environment": environment,
        "headline": headline(scenarios),
        "errors": errors,
        "scenarios": scenarios,
        **(extra or {}),
    }


@cache
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return loaded


def validation_errors(document: Any) -> list[str]:
    """Where the document breaks the schema ("path: message"), empty when it conforms."""
    validator = jsonschema.Draft202012Validator(schema())
    return [
        f"{'/'.join(str(p) for p in err.absolute_path) or '(top)'}: {err.message}"
        for err in sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    ]


def finite(value: Any) -> Any:
    """The value with NaN and infinities replaced by null (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def write_document(document: dict[str, Any], out_dir: Path) -> Path:
    """Writes result.json atomically (a reader never sees half a file)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RESULT_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(finite(document), indent=2, allow_nan=False) + "\n")
    tmp.replace(path)
    return path
