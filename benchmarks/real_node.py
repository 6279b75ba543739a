"""The real node's footprint, printed: RSS of each component this cluster started and the
memory its pods use (the node's cgroup), plus each pod's own cgroup. Run against a running
local cluster with a real node (make cluster-up / make demo):

    .venv/bin/python benchmarks/real_node.py [--state-dir .state/cluster]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vllm_localenv.cluster import DEFAULT_STATE_DIR, LocalCluster, _State
from vllm_localenv.node import CGROUP_ROOT

MEMORY = Path("/sys/fs/cgroup/memory")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cgroup_mib(path: Path) -> float:
    return int((path / "memory.usage_in_bytes").read_text()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_DIR))
    args = parser.parse_args()
    cluster = LocalCluster(Path(args.state_dir), real_node=True)
    state = _State.load((cluster.state_dir / "cluster.json").read_text())
    print(f"{'component':26s} {'RSS MiB':>9s}")
    for proc in state.procs:
        try:
            print(f"{proc.name:26s} {_rss_mib(proc.pid):9.0f}")
        except OSError:
            print(f"{proc.name:26s} {'exited':>9s}")
    pods = json.loads(cluster.kubectl("get", "pods", "-A", "-o", "json"))["items"]
    by_uid = {
        p["metadata"]["uid"]: f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
    }
    root = MEMORY / CGROUP_ROOT
    if root.is_dir():
        print(f"\n{'all pods of the real node':26s} {_cgroup_mib(root / 'kubepods'):9.0f}")
        for pod_dir in sorted(root.glob("kubepods/**/pod*")):
            uid = pod_dir.name.removeprefix("pod").replace("_", "-")
            if uid in by_uid:
                print(f"  {by_uid[uid]:58s} {_cgroup_mib(pod_dir):9.0f}")


if __name__ == "__main__":
    main()
