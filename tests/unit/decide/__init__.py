"""Unit tests of vllm_operator.decide."""
