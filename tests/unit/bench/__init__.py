"""Unit tests of vllm_bench (the runner)."""
