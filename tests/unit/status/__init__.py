"""Unit tests of vllm_operator.status."""
