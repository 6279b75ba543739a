"""Reads vLLM server argument lists with the installed vLLM's own argument parser.

Runs inside the vLLM virtual environment (the operator's environment has no vllm):
`python parse_vllm_args.py ANSWER.json < REQUEST.json` (vLLM logs to stdout). The request is
`{"cases": {NAME: {"args": [...], "engine_config": false}}}`; for every case the answer says
whether vLLM's OpenAI server would accept the arguments, exactly as its entry point reads them
(`python -m vllm.entrypoints.openai.api_server`: FlexibleArgumentParser + make_arg_parser +
validate_parsed_serve_args), then whether the engine arguments can be built from them. With
`engine_config`, it also builds the engine configuration, which reads the model's config.json
(so the model must be a local directory) and applies the platform's rules (on CPU: block size,
KV-cache size) without loading any weights. The answer also lists the parser's options, so the
caller can check its own tables (owned flags, aliases) against this vLLM.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-not-found]

import vllm  # type: ignore[import-not-found]

# where the server's parser lives moved between the supported versions (docs/versioning.md):
# 0.32 has vllm.entrypoints.launchers.cli_args, earlier ones vllm.entrypoints.openai.cli_args
try:
    from vllm.entrypoints.launchers.cli_args import (  # type: ignore[import-not-found]
        make_arg_parser,
        validate_parsed_serve_args,
    )
except ImportError:
    from vllm.entrypoints.openai.cli_args import (  # type: ignore[import-not-found]
        make_arg_parser,
        validate_parsed_serve_args,
    )
try:
    from vllm.utils.argparse_utils import (  # type: ignore[import-not-found]
        FlexibleArgumentParser,
    )
except ImportError:
    from vllm.utils import FlexibleArgumentParser  # type: ignore[import-not-found]


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    return repr(value)


def _check(parser: Any, args: list[str], engine_config: bool) -> dict[str, Any]:
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            namespace = parser.parse_args(args)
    except SystemExit:
        # argparse prints the usage, then "PROG: error: MESSAGE"
        lines = stderr.getvalue().strip().splitlines() or ["(no message)"]
        return {"ok": False, "stage": "parse", "error": lines[-1]}
    try:
        validate_parsed_serve_args(namespace)
        engine_args = AsyncEngineArgs.from_cli_args(namespace)
    except Exception as exc:  # noqa: BLE001 (the message is the answer)
        return {"ok": False, "stage": "validate", "error": f"{type(exc).__name__}: {exc}"}
    answer: dict[str, Any] = {"ok": True, "parsed": _jsonable(vars(namespace))}
    if engine_config:
        try:
            config = engine_args.create_engine_config()
        except Exception as exc:  # noqa: BLE001
            return {"ok": False, "stage": "engine_config", "error": f"{type(exc).__name__}: {exc}"}
        answer["engine_config"] = {
            "device": str(config.device_config.device_type),
            "max_model_len": config.model_config.max_model_len,
            "block_size": config.cache_config.block_size,
            "kv_cache_memory_bytes": config.cache_config.kv_cache_memory_bytes,
            "tensor_parallel_size": config.parallel_config.tensor_parallel_size,
            "served_model_name": _jsonable(config.model_config.served_model_name),
            "enable_prefix_caching": config.cache_config.enable_prefix_caching,
        }
    return answer


def main() -> None:
    request = json.load(sys.stdin)
    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI server"))
    deprecated = {id(a) for a in getattr(parser, "_deprecated", set())}
    options = {
        option: {
            "dest": action.dest,
            "aliases": list(action.option_strings),
            "deprecated": id(action) in deprecated or bool(getattr(action, "deprecated", False)),
        }
        for option, action in parser._option_string_actions.items()
    }
    results = {
        name: _check(parser, case["args"], bool(case.get("engine_config")))
        for name, case in request["cases"].items()
    }
    answer = {"vllm": vllm.__version__, "options": options, "results": results}
    Path(sys.argv[1]).write_text(json.dumps(answer), encoding="utf-8")


if __name__ == "__main__":
    main()
