"""The runner's scenarios. Each is `async def run(ctx, result)`: it fills the
ScenarioResult as it goes and raises BenchError when the server fails it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from vllm_bench.scenarios import batching, capacity, naive, prefix, streaming
from vllm_bench.scenarios.base import Context, ScenarioResult

Scenario = Callable[[Context, ScenarioResult], Awaitable[None]]

SCENARIOS: dict[str, Scenario] = {
    "capacity": capacity.run,
    "batching": batching.run,
    "prefix": prefix.run,
    "streaming": streaming.run,
    "naive": naive.run,
}
DEFAULT_SCENARIOS = ("capacity", "batching", "prefix", "streaming")
