"""The benchmark Job's entry point: runs vllm-bench against the new revision, then writes the
result into the run's ConfigMap (the only object its ServiceAccount may touch)."""
