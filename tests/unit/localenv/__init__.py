"""Unit tests of vllm_localenv (the harness) and the image builds."""
