"""Command line for the local cluster: `python -m vllm_localenv up|down|status|reset|env`."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from vllm_localenv.cluster import DEFAULT_STATE_DIR, ClusterError, LocalCluster, Ports
from vllm_localenv.operator_process import OperatorProcess, install


def _cluster(args: argparse.Namespace) -> LocalCluster:
    ports = Ports.free() if os.environ.get("VLLM_LOCALENV_PORTS") == "free" else None
    return LocalCluster(state_dir=Path(args.state_dir), ports=ports)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm-localenv", description=__doc__)
    parser.add_argument(
        "--state-dir",
        default=str(DEFAULT_STATE_DIR),
        help="where the PKI, kubeconfig, logs and etcd data live",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("up", help="start the local cluster (no-op when it is running)")
    sub.add_parser("down", help="stop the processes `up` started, and nothing else")
    sub.add_parser("status", help="which components are running")
    sub.add_parser("reset", help="stop and delete all state (PKI, etcd data, logs)")
    sub.add_parser("env", help="print the export line for kubectl")
    sub.add_parser(
        "operator",
        help="install the CRDs and RBAC, start the operator in the "
        "background as its ServiceAccount (stopped by `down`)",
    )
    args = parser.parse_args(argv)
    cluster = _cluster(args)
    export = f"export KUBECONFIG={cluster.kubeconfig} PATH={cluster.bin_dir}:$PATH"
    try:
        if args.cmd == "up":
            t0 = time.monotonic()
            if not cluster.up(log=lambda m: print(f"  {m}", flush=True)):
                print(
                    f"a local cluster is already running in {cluster.state_dir} "
                    f"(apiserver {cluster.server}); not starting another"
                )
            else:
                print(f"local cluster up in {time.monotonic() - t0:.1f}s at {cluster.server}")
            print("use it with:")
            print(f"  {export}")
        elif args.cmd == "down":
            stopped = cluster.down()
            print(f"stopped: {', '.join(stopped)}" if stopped else "no local cluster was running")
        elif args.cmd == "status":
            running = cluster.running()
            if not running:
                print("not running")
                return 1
            for name, alive in running.items():
                print(f"{name:26s} {'running' if alive else 'EXITED'}")
            return 0 if all(running.values()) else 1
        elif args.cmd == "reset":
            cluster.reset()
            print(f"stopped and removed {cluster.state_dir}")
        elif args.cmd == "env":
            print(export)
        elif args.cmd == "operator":
            if cluster.running().get("vllm-operator"):
                print("the operator is already running")
                return 0
            install(cluster)
            proc = OperatorProcess(
                cluster, cluster.log_dir / "operator.log", resync_seconds=30, detached=True
            )
            proc.start()
            print(f"operator running (pid {proc.pid}); log: {proc.log_path}")
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
