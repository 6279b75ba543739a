"""Entry point: `vllm-operator` (or `python -m vllm_operator`) runs the operator."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import kopf

from vllm_operator import handlers
from vllm_operator.settings import OperatorSettings


def main() -> int:
    settings = handlers.SETTINGS
    logging.basicConfig(
        level=os.environ.get("VLLM_OPERATOR_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    assert isinstance(settings, OperatorSettings)
    asyncio.run(
        kopf.operator(
            clusterwide=settings.namespace is None,
            namespaces=[settings.namespace] if settings.namespace else (),
            standalone=settings.standalone,
            peering_name=settings.peering_name,
            liveness_endpoint=settings.liveness_endpoint or None,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
