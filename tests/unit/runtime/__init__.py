"""Unit tests of vllm_operator.runtime."""
