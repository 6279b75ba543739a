"""vllm_bench: the benchmark runner, a library and the `vllm-bench` CLI.

It measures a running vLLM OpenAI-compatible server from the outside: KV-cache capacity,
continuous batching (serial against concurrent, a concurrency ladder), prefix caching (cold
against warm TTFT) and streaming latency, optionally against naive transformers generate().
The operator runs it as a Job; a user can run it by hand against any vLLM server.

It is independent of the operator (no kopf, no Kubernetes client; import-linter checks this).
This module imports nothing, so `python -m vllm_bench.naive` works in an environment that has
torch and transformers but none of the runner's dependencies.

Flow: cli -> runner (checks, budget) -> scenarios/* (client, metrics, workload, stats)
-> results (the versioned JSON document) -> report (terminal table, PNG plots, HTML).
"""

SCHEMA_VERSION = "2"  # 2: maxRps may be null (no cap), rounds/spread, warm-up, knee headline
__version__ = "0.1.0"
