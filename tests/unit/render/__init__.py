"""Unit tests of vllm_operator.render."""
