"""The controller loop around the reconcile: kopf's edge, the work queue, the watch caches,
leadership (the metrics registry it publishes is vllm_operator.metrics)."""
