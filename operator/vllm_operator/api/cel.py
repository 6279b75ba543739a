"""Step 1 of the flow (spec): the CEL rules that stand alone from the models they validate.

The builder of one x-kubernetes-validations entry (cel), and the rules on passthrough arguments
(engine.extraArgs, benchmark.args): the flags the operator owns, the CEL lists made of them,
and owned_flag / owned_runner_flag, the Python readings that the models' validators use and
the CEL rules mirror. The rules declared on one model (its model_config or a Field's
json_schema_extra) and their model_validator mirrors stay beside that model in api/spec.py.
"""

from __future__ import annotations

import re

from pydantic import JsonValue

# Arguments the operator renders itself; the passthrough must not set them.
OWNED_ARGS: tuple[str, ...] = (
    "--host",
    "--port",
    "--model",
    "--served-model-name",
    "--revision",
    "--tensor-parallel-size",
    "--max-model-len",
    "--gpu-memory-utilization",
    "--device-memory-utilization",  # vLLM's alias of --gpu-memory-utilization
    "--kv-cache-memory-bytes",
    "--block-size",
    "--max-num-seqs",
    "--dtype",
    "--quantization",
    "--kv-cache-dtype",
    "--enforce-eager",
    "--no-enforce-eager",
    "--enable-log-requests",
    "--no-enable-log-requests",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--speculative-config",
    "--shutdown-timeout",
    "--api-key",
    "--download-dir",
    "-tp",  # vLLM's short forms of --tensor-parallel-size, --quantization, --speculative-config
    "-q",
    "-sc",
)
_OWNED_CEL = "[" + ", ".join(f"'{o}'" for o in OWNED_ARGS) + "]"
# Long flags extraArgs may neither name nor abbreviate (argparse reads a unique prefix of a
# long flag as that flag): the owned ones, their --no- negations (vLLM's boolean flags are
# argparse BooleanOptionalActions), --config (a YAML file of arguments, which could set any
# of them) and --uds (serve on a socket, not on the port the probes and the Service use).
DENIED_LONG_ARGS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [a for a in OWNED_ARGS if a.startswith("--")]
        + [f"--no-{a[2:]}" for a in OWNED_ARGS if a.startswith("--") and a[:5] != "--no-"]
        + ["--config", "--uds"]
    )
)
_DENIED_CEL = "[" + ", ".join(f"'{o}'" for o in DENIED_LONG_ARGS) + "]"
# Runner (vllm-bench run) flags the operator sets on the benchmark Job: where the load and the
# service's API key go, what is measured, where the result is written, the time budget.
# benchmark.args may neither name nor abbreviate them (argparse reads a unique prefix of a long
# flag as that flag); render/benchmark.py also places the operator's own flags last.
OWNED_RUNNER_ARGS: tuple[str, ...] = (
    "--url",
    "--model",
    "--scenarios",
    "--out",
    "--max-duration-seconds",
    "--api-key",
    # spec.objective's latencies (the ladder refines around them)
    "--objective-ttft",
    "--objective-tpot",
    "--objective-percentile",
)
_RUNNER_CEL = "[" + ", ".join(f"'{o}'" for o in OWNED_RUNNER_ARGS) + "]"
# a value that starts with a dash, which argparse reads as a value, not an option
NEGATIVE_NUMBER = r"^-([0-9]+|[0-9]*[.][0-9]+)$"


def cel(rule: str, message: str, field_path: str | None = None) -> dict[str, JsonValue]:
    """One x-kubernetes-validations entry (a CEL rule the API server evaluates)."""
    out: dict[str, JsonValue] = {"rule": rule, "message": message}
    if field_path:
        out["fieldPath"] = field_path
    return out


def owned_flag(arg: str) -> str | None:
    """The operator-owned flag `arg` sets, read as vLLM's parser reads it, or None.

    vLLM reads underscores as dashes (--max_model_len), `--flag.key value` as one key of a JSON
    flag (--speculative-config.method), and, like every argparse parser, an unambiguous prefix
    of a long flag as that flag (--max-model 100 sets --max-model-len). A prefix of an owned
    flag is refused even when it is ambiguous: vLLM would refuse it too. tests/vllm checks
    against the pinned vLLM's parser that no flag of its own is such a prefix.

    Every short option is refused (returned as it is): argparse reads `-qfp8` as `-q fp8`
    and a prefix of a single-dash option too, and every vLLM short option has a long form.
    A value starting with a dash (a negative number) is not an option.
    """
    if arg.startswith("-") and not arg.startswith("--"):
        return None if re.match(NEGATIVE_NUMBER, arg) else arg
    if not arg.startswith("--"):
        return None
    key = arg.split("=", 1)[0].split(".", 1)[0].replace("_", "-")
    return next((denied for denied in DENIED_LONG_ARGS if denied.startswith(key)), None)


def owned_runner_flag(arg: str) -> str | None:
    """The operator-owned runner flag `arg` sets, read as the runner's argparse reads it, or
    None: a long flag or a prefix of one (`--ur=x`, `--` alone), before any `=`; every short
    option (the runner has none but -h; argparse would try prefixes) unless a negative number."""
    if arg.startswith("-") and not arg.startswith("--"):
        return None if re.match(NEGATIVE_NUMBER, arg) else arg
    if not arg.startswith("--"):
        return None
    key = arg.split("=", 1)[0]
    return next((owned for owned in OWNED_RUNNER_ARGS if owned.startswith(key)), None)
