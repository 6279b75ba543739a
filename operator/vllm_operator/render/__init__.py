"""Step 2 of the flow (render): pure functions from (Service, OperatorSettings) to manifests.

No Kubernetes client, no kopf, no I/O. Every function returns a fresh dict.
"""
