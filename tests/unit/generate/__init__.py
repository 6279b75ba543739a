"""Unit tests of vllm_operator.generate."""
