"""Command line for the local environment: `python -m vllm_localenv COMMAND`.

up | down | status | reset | env     the local cluster
deploy-operator                     CRDs + RBAC + admission policies + the operator in-cluster
model-volume NAMESPACE              a PVC bound to a local volume holding the tiny model
operator                            CRDs + RBAC + the operator as a host process (development)
vllm                                a real vLLM server on CPU on the host (the tiny model)
play-benchmark SERVICE              run a benchmark Job's command on the host (simulated GPU pods)
check-host                          every command of scripts/host-packages.tsv is on this host
demo-canary SERVICE                 make demo's second half: a bad revision stopped at its canary, a
                                    good one promoted, a client streaming through the Service
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from vllm_localenv import benchjob, demo, host_packages, model_volume
from vllm_localenv.cluster import DEFAULT_STATE_DIR, ClusterError, LocalCluster, Ports
from vllm_localenv.node import NodeError
from vllm_localenv.operator_process import OperatorProcess, deploy_operator, install
from vllm_localenv.vllm_server import VllmServer, tiny_model


def _export(cluster: LocalCluster) -> str:
    return f"export KUBECONFIG={cluster.kubeconfig} PATH={cluster.bin_dir}:$PATH"


def _up(cluster: LocalCluster, _: argparse.Namespace) -> int:
    t0 = time.monotonic()
    if not cluster.up(log=lambda m: print(f"  {m}", flush=True)):
        print(
            f"a local cluster is already running in {cluster.state_dir} "
            f"(apiserver {cluster.server}); not starting another"
        )
    else:
        print(f"local cluster up in {time.monotonic() - t0:.1f}s at {cluster.server}")
    print(f"use it with:\n  {_export(cluster)}")
    if cluster.monitoring:
        print(
            f"Prometheus (vLLM pods, the operator, the shipped alert rules): "
            f"{cluster.prometheus_url}\n"
            "custom.metrics.k8s.io: prometheus-adapter (kubectl get --raw "
            "/apis/custom.metrics.k8s.io/v1beta2)"
        )
    return 0


def _down(cluster: LocalCluster, _: argparse.Namespace) -> int:
    stopped = cluster.down()
    print(f"stopped: {', '.join(stopped)}" if stopped else "no local cluster was running")
    return 0


def _status(cluster: LocalCluster, _: argparse.Namespace) -> int:
    running = cluster.running()
    if not running:
        print("not running")
        return 1
    for name, alive in running.items():
        print(f"{name:26s} {'running' if alive else 'EXITED'}")
    return 0 if all(running.values()) else 1


def _reset(cluster: LocalCluster, _: argparse.Namespace) -> int:
    cluster.reset()
    print(f"stopped and removed {cluster.state_dir}")
    return 0


def _env(cluster: LocalCluster, _: argparse.Namespace) -> int:
    print(_export(cluster))
    return 0


def _operator(cluster: LocalCluster, _: argparse.Namespace) -> int:
    if cluster.running().get("vllm-operator"):
        print("the operator is already running")
        return 0
    install(cluster)
    proc = OperatorProcess(
        cluster, cluster.log_dir / "operator.log", resync_seconds=30, detached=True
    )
    proc.start()
    print(f"operator running (pid {proc.pid}); log: {proc.log_path}")
    return 0


def _deploy_operator(cluster: LocalCluster, _: argparse.Namespace) -> int:
    deploy_operator(cluster)
    print("operator running in-cluster (deploy/local: image localhost/vllm-operator:dev)")
    return 0


def _model_volume(cluster: LocalCluster, args: argparse.Namespace) -> int:
    model_volume.create(cluster, args.namespace, args.claim)
    print(f"PVC {args.namespace}/{args.claim} bound to a local volume holding the tiny model")
    return 0


def _vllm(cluster: LocalCluster, args: argparse.Namespace) -> int:
    if cluster.running().get("vllm"):
        print("the local vLLM server is already running")
        return 0
    server = VllmServer(
        model=tiny_model(),
        served_name=args.served_model_name,
        port=args.port,
        log_path=cluster.log_dir / "vllm.log",
    )
    t0 = time.monotonic()
    server.start()
    cluster.adopt("vllm", server.process)
    print(
        f"vLLM serving {args.served_model_name} at {server.url} "
        f"(ready in {time.monotonic() - t0:.0f}s); log: {server.log_path}"
    )
    return 0


def _play(cluster: LocalCluster, args: argparse.Namespace) -> int:
    job = benchjob.current_job(cluster, args.namespace, args.service)
    workdir = cluster.state_dir / "benchmarks" / job["metadata"]["name"]
    code = benchjob.play(cluster, args.namespace, job, args.url, workdir)
    print(f"benchmark {job['metadata']['name']} exited {code}; files in {workdir}")
    return code


def _demo_canary(cluster: LocalCluster, args: argparse.Namespace) -> int:
    return 1 if demo.canary(cluster, args.namespace, args.service) else 0


def _check_host(_: LocalCluster, args: argparse.Namespace) -> int:
    return host_packages.check(tuple(args.purpose) if args.purpose else None)


COMMANDS: dict[str, tuple[Callable[[LocalCluster, argparse.Namespace], int], str]] = {
    "up": (_up, "start the local cluster (no-op when it is running)"),
    "down": (_down, "stop the processes this tool started, and nothing else"),
    "status": (_status, "which components are running"),
    "reset": (_reset, "stop and delete all state (PKI, etcd data, logs)"),
    "env": (_env, "print the export line for kubectl"),
    "deploy-operator": (
        _deploy_operator,
        "CRDs, RBAC, admission policies, the operator in-cluster from its image (real node)",
    ),
    "model-volume": (
        _model_volume,
        "a PVC bound to a local volume on the real node holding the tiny test model",
    ),
    "operator": (
        _operator,
        (
            "install the CRDs and RBAC, start the operator in the background "
            "as its ServiceAccount (stopped by `down`)"
        ),
    ),
    "vllm": (
        _vllm,
        (
            "start a real vLLM server on CPU (the tiny test model) in the background "
            "on 127.0.0.1 (stopped by `down`)"
        ),
    ),
    "check-host": (
        _check_host,
        "check that every command of scripts/host-packages.tsv is on this host",
    ),
    "demo-canary": (
        _demo_canary,
        "make demo's canary half: a bad revision aborted on its canary, a good one promoted",
    ),
    "play-benchmark": (
        _play,
        (
            "run a service's benchmark Job command here, against the local "
            "vLLM server, as its pod would (kwok runs nothing in pods)"
        ),
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vllm-localenv",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--state-dir",
        default=str(DEFAULT_STATE_DIR),
        help="where the PKI, kubeconfig, logs and etcd data live",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    parsers = {name: sub.add_parser(name, help=text) for name, (_, text) in COMMANDS.items()}
    parsers["vllm"].add_argument("--served-model-name", default="tiny")
    parsers["vllm"].add_argument("--port", type=int, default=18000)
    parsers["model-volume"].add_argument("namespace", nargs="?", default="default")
    parsers["model-volume"].add_argument("--claim", default="tiny-model")
    parsers["demo-canary"].add_argument("service")
    parsers["demo-canary"].add_argument("-n", "--namespace", default="default")
    parsers["play-benchmark"].add_argument("service")
    parsers["play-benchmark"].add_argument("-n", "--namespace", default="default")
    parsers["play-benchmark"].add_argument("--url", default="http://127.0.0.1:18000")
    parsers["check-host"].add_argument(
        "--purpose",
        action="append",
        choices=sorted({p.purpose for p in host_packages.load()}),
        help="only the packages for this purpose (repeatable; default: all)",
    )
    args = parser.parse_args(argv)
    ports = Ports.free() if os.environ.get("VLLM_LOCALENV_PORTS") == "free" else None
    # the real node (kubelet + containerd on this host) is on unless switched off
    real_node = os.environ.get("VLLM_LOCALENV_REAL_NODE", "1") != "0"
    cluster = LocalCluster(state_dir=Path(args.state_dir), ports=ports, real_node=real_node)
    try:
        return COMMANDS[args.cmd][0](cluster, args)
    except (ClusterError, NodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
