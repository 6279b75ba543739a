"""A server fault for the canary's fault matrix (tests/node/test_canary_faults.py): a revision
that answers every live request with a 5xx while its engine and its /health stay up.

The test copies this file beside the model on the canary's claim and starts the revision with
`--middleware vllm_fault.passthrough` and PYTHONPATH=/models: vLLM imports the module as it
builds its app. Importing it wraps vLLM's completion handler: from the moment a file named
`fault-5xx` appears beside this module (the test creates it once the canary bakes), the handler
raises for every request, so vLLM answers each with its own 500, counted by its
http_requests_total as a 5xx of /v1/completions (the counter the bake compares). Before that
the revision serves as any other: its benchmark run passes.

Not imported by the tests themselves (it needs vLLM, which only the server's image has)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm.entrypoints.openai.completion.serving import (  # type: ignore[import-not-found]
    OpenAIServingCompletion,
)

TRIGGER = Path(__file__).with_name("fault-5xx")
_create_completion = OpenAIServingCompletion.create_completion


async def _failing_once_triggered(self: Any, request: Any, raw_request: Any = None) -> Any:
    if TRIGGER.exists():
        raise RuntimeError(f"fault matrix: the completion handler fails ({TRIGGER} exists)")
    return await _create_completion(self, request, raw_request)


OpenAIServingCompletion.create_completion = _failing_once_triggered


async def passthrough(request: Any, call_next: Any) -> Any:
    """The middleware vLLM's --middleware names (what loads this module): changes nothing."""
    return await call_next(request)
