"""Unit tests of vllm_operator.observe."""
