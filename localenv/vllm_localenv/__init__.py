"""A real, local Kubernetes control plane and a real vLLM-on-CPU server for development and tests.

Nothing here is used by the operator at run time: it is the ground the tests, the demo and
the benchmarks stand on (see docs/local-cluster.md).
"""
