"""Entry point: `vllm-operator` (or `python -m vllm_operator`) runs the operator."""

from __future__ import annotations

import asyncio
import random
import sys

import kopf

from vllm_operator import handlers


def main() -> int:
    settings = handlers.SETTINGS
    # kopf's formatter prefixes object messages with [namespace/name]; JSON for log pipelines
    log_format = kopf.LogFormat.JSON if settings.log_json else kopf.LogFormat.FULL
    kopf.configure(verbose=settings.verbose, log_format=log_format, log_prefix=True)
    # leader election replaces kopf peering: kopf only watches, every replica alike
    standalone = settings.standalone or settings.leader_election
    asyncio.run(
        kopf.operator(
            clusterwide=not settings.watched_namespaces(),
            namespaces=settings.watched_namespaces(),
            standalone=standalone,
            # a peering name makes kopf's peering mandatory: standalone, every watch would
            # stay paused ("peering CRD is missing"), so none is given then
            peering_name=None if standalone else settings.peering_name,
            # equal priorities make every replica pause (kopf's rule); random ones elect one
            priority=settings.priority
            if settings.priority is not None
            else random.randint(1, 2**30),  # noqa: S311
            liveness_endpoint=settings.liveness_endpoint or None,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
