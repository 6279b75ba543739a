"""Step "write": the one HTTP transport (retries, error mapping, fencing), server-side apply and
prune, the benchmark runs' writes, the status's write (vllm_operator.status computes it) and
Events."""
