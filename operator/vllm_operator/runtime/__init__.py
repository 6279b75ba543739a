"""The controller loop around the reconcile: kopf's edge, the work queue, the watch caches,
leadership, the operator's own metrics."""
