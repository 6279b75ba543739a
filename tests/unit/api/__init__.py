"""Unit tests of vllm_operator.api."""
