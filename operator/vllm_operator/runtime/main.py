"""Entry point: `vllm-operator` (or `python -m vllm_operator`) runs the operator."""

from __future__ import annotations

import asyncio
import sys

import kopf

from vllm_operator.runtime import handlers


def main() -> int:
    settings = handlers.SETTINGS
    # kopf's formatter prefixes object messages with [namespace/name]; JSON for log pipelines
    log_format = kopf.LogFormat.JSON if settings.log_json else kopf.LogFormat.FULL
    kopf.configure(verbose=settings.verbose, log_format=log_format, log_prefix=True)
    settings.warn_retired()
    asyncio.run(
        kopf.operator(
            clusterwide=not settings.watched_namespaces(),
            namespaces=settings.watched_namespaces(),
            # kopf only watches VLLMServices; leadership is the fenced Lease (runtime/leader.py), so
            # kopf's own peering is off: no peering objects, no priorities, no log parsing
            standalone=True,
            liveness_endpoint=settings.liveness_endpoint or None,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
