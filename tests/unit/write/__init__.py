"""Unit tests of vllm_operator.write."""
