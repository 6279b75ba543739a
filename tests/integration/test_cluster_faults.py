"""The cluster scripts fail with a message naming the cause, and never touch processes they
did not start."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_localenv.cluster import ClusterError, LocalCluster, Ports

pytestmark = pytest.mark.cluster


def test_a_second_up_says_it_is_running(cluster: LocalCluster) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "vllm_localenv", "--state-dir", str(cluster.state_dir), "up"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "already running" in res.stdout
    assert f"KUBECONFIG={cluster.kubeconfig}" in res.stdout
    assert all(cluster.running().values())  # nothing was started twice or stopped


def test_a_taken_port_is_named(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        free = Ports.free()
        lc = LocalCluster(
            state_dir=tmp_path / "s", ports=Ports(free.etcd_client, free.etcd_peer, port, free.kwok)
        )
        with pytest.raises(ClusterError, match=rf"port {port} on 127.0.0.1 \(kube-apiserver\)"):
            lc.up()
    assert lc.running() == {}


def test_missing_binaries_are_named(tmp_path: Path) -> None:
    lc = LocalCluster(state_dir=tmp_path / "s", bin_dir=tmp_path / "empty", ports=Ports.free())
    with pytest.raises(
        ClusterError, match=r"missing binaries .*etcd, kube-apiserver.*make control-plane"
    ):
        lc.up()


def test_a_component_exiting_at_start_up_shows_its_log(tmp_path: Path) -> None:
    state = tmp_path / "s"
    state.mkdir()
    (state / "etcd").write_text("a file where etcd expects its data directory")
    lc = LocalCluster(state_dir=state, ports=Ports.free())
    with pytest.raises(ClusterError, match=r"etcd exited with code \d+ during start-up") as err:
        lc.up(timeout=60)
    assert "last lines of" in str(err.value)
    assert len(str(err.value).splitlines()) > 2  # the log tail is included
    assert lc.running() == {}  # nothing left behind


def test_down_never_kills_a_process_it_did_not_start(tmp_path: Path) -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        state = tmp_path / "s"
        state.mkdir()
        # a stale record whose pid now belongs to another process (pid reuse)
        (state / "cluster.json").write_text(
            json.dumps(
                {
                    "ports": dataclasses.asdict(Ports()),
                    "procs": [
                        {
                            "name": "etcd",
                            "pid": stranger.pid,
                            "start_ticks": 1,
                            "exe": os.path.realpath(sys.executable),
                        }
                    ],
                }
            )
        )
        lc = LocalCluster(state_dir=state)
        assert lc.running() == {"etcd": False}
        assert lc.down() == []
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()
