"""`python -m vllm_holder --config FILE`: the holder's entry point (its image's ENTRYPOINT).

SIGTERM starts the drain: the pod reports not Ready at once, the service ports take new
connections for --accept-seconds more (until the Service's endpoints have dropped the pod) and
then close; held and in-flight requests are
kept until answered or until --grace-seconds have passed (the Deployment's
terminationGracePeriodSeconds must be longer: docs/design/scale-to-zero.md), then exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from vllm_holder.hold import Timing
from vllm_holder.server import Holder, HolderSettings, MiB
from vllm_holder.wake import ApiAccess, KubeWaker

log = logging.getLogger("vllm_holder")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m vllm_holder",
        description="Holds requests for scaled-to-zero vLLM services until a replica is Ready.",
    )
    p.add_argument("--config", type=Path, required=True, help="the services' JSON document")
    p.add_argument("--host", default="0.0.0.0", help="address of every listener (default: all)")  # noqa: S104
    p.add_argument("--admin-port", type=int, default=9090, help="metrics, /healthz, /readyz")
    p.add_argument(
        "--grace-seconds",
        type=float,
        default=600.0,
        help="after SIGTERM, how long held and in-flight requests are kept (default 600)",
    )
    p.add_argument(
        "--accept-seconds",
        type=float,
        default=0.0,
        help="after SIGTERM, how long the service ports still take new connections (default 0)",
    )
    p.add_argument("--poll-seconds", type=float, default=2.0, help="config file re-read period")
    p.add_argument(
        "--probe-interval-seconds",
        type=float,
        default=0.5,
        help="GET /health at most this often while holding",
    )
    p.add_argument(
        "--keepalive-seconds", type=float, default=5.0, help="SSE comment period for held streams"
    )
    p.add_argument(
        "--wake-timeout-seconds",
        type=float,
        default=60.0,
        help="ask for a replica again after this long without one",
    )
    p.add_argument(
        "--max-body-bytes", type=int, default=8 * MiB, help="largest request body held (413 beyond)"
    )
    p.add_argument(
        "--api-server", default=None, help="Kubernetes API base URL (default: in-cluster)"
    )
    p.add_argument(
        "--namespace", default=None, help="the VLLMServices' namespace (default: the pod's)"
    )
    p.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="bearer token file (default: the service account's)",
    )
    p.add_argument(
        "--ca-file",
        type=Path,
        default=None,
        help="the API server's CA bundle (default: the service account's)",
    )
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


async def serve(args: argparse.Namespace) -> int:
    settings = HolderSettings(
        config_path=args.config,
        host=args.host,
        admin_port=args.admin_port,
        grace_seconds=args.grace_seconds,
        accept_seconds=args.accept_seconds,
        poll_seconds=args.poll_seconds,
        max_body_bytes=args.max_body_bytes,
        timing=Timing(
            probe_interval_seconds=args.probe_interval_seconds,
            keepalive_seconds=args.keepalive_seconds,
            wake_timeout_seconds=args.wake_timeout_seconds,
        ),
    )
    access = ApiAccess.in_cluster(
        base_url=args.api_server,
        namespace=args.namespace,
        token_file=args.token_file,
        ca_file=args.ca_file,
    )
    holder = Holder(settings, waker=KubeWaker(access))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await holder.start()
    log.info("admin on port %d; %s", holder.admin_port, holder.ready()[1])
    await stop.wait()
    log.info("SIGTERM: draining")
    await holder.drain()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
