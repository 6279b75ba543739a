"""Benchmark every rollout: the real operator on the local cluster, the real runner against
the real vLLM-on-CPU server.

kwok plays the pods, so nothing runs inside the benchmark Job's pod. The tests play its
container instead: they take the Job's command and arguments from the API server, run them
here under the Job's own ServiceAccount (a TokenRequest token, the identity the pod would
have), with one substitution - the in-cluster URL of the Service becomes the local vLLM
server's - and relay the exit code to kwok, which then finishes the pod as a kubelet would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import (
    apply,
    audit,
    condition,
    get,
    items,
    ready,
    reconciles_seen,
    sample,
    wait_for,
)
from vllm_localenv import benchjob
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess
from vllm_localenv.vllm_server import VllmServer

pytestmark = [pytest.mark.cluster, pytest.mark.vllm]
SMALL = [
    "--requests",
    "8",
    "--output-tokens",
    "16",
    "--max-concurrency",
    "8",
    "--prefix-requests",
    "4",
    "--streaming-requests",
    "4",
]


def service(name: str, **spec: Any) -> dict[str, Any]:
    m = sample("minimal")
    m["metadata"]["name"] = name
    m["spec"]["model"]["servedModelName"] = "tiny"  # what the local vLLM server serves
    m["spec"]["benchmark"] = {"args": SMALL, **spec.pop("benchmark", {})}
    m["spec"].update(spec)
    return m


def job_of(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    svc = wait_for(f"{name} Ready", lambda: ready(cluster, namespace, name))
    job_name = f"{name}-bench-{svc['status']['revision'][:8]}"
    return dict(wait_for(f"job {job_name}", lambda: get(cluster, namespace, "job", job_name)))


def play_job(
    cluster: LocalCluster, namespace: str, job: dict[str, Any], url: str, tmp: Path
) -> int:
    return benchjob.play(cluster, namespace, job, url, tmp)


def next_job(
    cluster: LocalCluster, namespace: str, after: dict[str, Any], what: str
) -> dict[str, Any]:
    """Waits for a benchmark Job other than `after` (the run of a newer revision)."""
    return dict(
        wait_for(
            what,
            lambda: next(
                (
                    j
                    for j in items(cluster, namespace, "jobs")
                    if j["metadata"]["name"] != after["metadata"]["name"]
                ),
                None,
            ),
        )
    )


def confirmation_of(
    cluster: LocalCluster, namespace: str, failed: dict[str, Any]
) -> dict[str, Any]:
    """The Job of the run that confirms `failed`'s failed verdict: the same revision, a name
    of its own (the run's name and a suffix)."""
    prefix = f"{failed['metadata']['name']}-"
    return dict(
        wait_for(
            "the confirmation run",
            lambda: next(
                (
                    j
                    for j in items(cluster, namespace, "jobs")
                    if j["metadata"]["name"].startswith(prefix)
                ),
                None,
            ),
        )
    )


@contextlib.contextmanager
def slow_first_byte(url: str, delay: float) -> Iterator[str]:
    """A TCP relay to `url` that holds the first bytes of every response for `delay`
    seconds: a noisy neighbour's queue in front of the server, so that every time to first
    token of a run through it is at least `delay` (the run fails a TTFT gate), while the
    server itself is the same. Yields the relay's URL. `delay` stays below the server's
    keep-alive timeout (uvicorn's 5 s), or the server closes a connection the client is
    about to reuse."""
    target = urllib.parse.urlsplit(url)
    loop = asyncio.new_event_loop()
    ready: queue.Queue[int] = queue.Queue()

    async def pump(reader: Any, writer: Any, pending: list[bool], hold: bool) -> None:
        try:
            while data := await reader.read(65536):
                if hold and pending[0]:
                    await asyncio.sleep(delay)
                    pending[0] = False
                if not hold:
                    pending[0] = True  # a request went up: hold its response's first bytes
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def relay(client_r: Any, client_w: Any) -> None:
        up_r, up_w = await asyncio.open_connection(target.hostname, target.port)
        pending = [False]
        await asyncio.gather(
            pump(client_r, up_w, pending, hold=False), pump(up_r, client_w, pending, hold=True)
        )

    async def serve() -> None:
        server = await asyncio.start_server(relay, "127.0.0.1", 0)
        ready.put(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(serve())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    port = ready.get(timeout=10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for task in asyncio.all_tasks(loop):
            loop.call_soon_threadsafe(task.cancel)


def target_pods(job: dict[str, Any]) -> set[str]:
    """The pod a run measures, as its Job's annotation names it ("<pod> <url>")."""
    note = (job["metadata"].get("annotations") or {}).get("serving.vllm-operator.dev/target-pod")
    return {note.split()[0]} if note else set()


def bench_status(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    return dict((get(cluster, namespace, "vllmservice", name) or {}).get("status", {}))


def test_a_finished_rollout_is_benchmarked_and_the_results_kept(
    operator: OperatorProcess,
    cluster: LocalCluster,
    namespace: str,
    vllm_server: VllmServer,
    tmp_path: Path,
) -> None:
    apply(
        cluster,
        namespace,
        service(
            "bench",
            benchmark={"thresholds": {"minOutputTokensPerSecond": 1, "minKvCacheTokens": 1}},
        ),
    )
    job = job_of(cluster, namespace, "bench")
    rev = bench_status(cluster, namespace, "bench")["revision"]
    # the documented Job spec
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 1200
    assert spec["ttlSecondsAfterFinished"] == 3600
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "bench-bench"
    assert pod["securityContext"]["runAsNonRoot"] is True
    c = pod["containers"][0]
    assert c["resources"]["limits"]["memory"] == "2Gi"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    args = c["args"]
    # one Ready pod of the revision, measured directly at its IP (not the Service)
    pods = items(cluster, namespace, "pods", "app.kubernetes.io/instance=bench")
    ips = {p["status"].get("podIP") for p in pods if p["metadata"]["name"] in target_pods(job)}
    assert args[args.index("--url") + 1] in {f"http://{ip}:8000" for ip in ips}
    assert args[args.index("--model") + 1] == "tiny"
    role = get(cluster, namespace, "role", "bench-bench")
    assert role is not None
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [job["metadata"]["name"]],
            "verbs": ["get", "patch"],
        }
    ]
    st = bench_status(cluster, namespace, "bench")
    assert condition({"status": st}, "BenchmarkComplete")["reason"] == "BenchmarkRunning"

    assert play_job(cluster, namespace, job, vllm_server.url, tmp_path) == 0

    def measured() -> dict[str, Any] | None:
        s = bench_status(cluster, namespace, "bench")
        return s if condition({"status": s}, "BenchmarkComplete").get("status") == "True" else None

    st = wait_for("BenchmarkComplete=True", measured)
    b = st["benchmark"]
    assert b["revision"] == rev
    assert b["state"] == "Complete"
    assert b["outputTokensPerSecond"] > 0
    assert b["ttftP95Seconds"] > 0
    # the capacity agrees with what the server itself reports
    metrics = urllib.request.urlopen(f"{vllm_server.url}/metrics", timeout=60).read().decode()
    info = next(line for line in metrics.splitlines() if line.startswith("vllm:cache_config_info"))
    blocks = int(info.split('num_gpu_blocks="')[1].split('"')[0])
    block_size = int(info.split('block_size="')[1].split('"')[0])
    assert b["kvCacheTokens"] == blocks * block_size
    assert condition({"status": st}, "BenchmarkPassed")["status"] == "True"
    assert condition({"status": st}, "Ready")["status"] == "True"
    # the full result survives the Job: a ConfigMap owned by the service
    cm = get(cluster, namespace, "configmap", job["metadata"]["name"])
    assert cm is not None
    assert (
        json.loads(cm["data"]["result.json"])["headline"]["outputTokensPerSecond"]
        == b["outputTokensPerSecond"]
    )
    wait_for(
        "the Job to complete",
        lambda: (
            condition(get(cluster, namespace, "job", job["metadata"]["name"]), "Complete").get(
                "status"
            )
            == "True"
        ),
    )
    # printer columns and the operator's own metrics
    wide = cluster.kubectl("get", "vsvc", "bench", "-n", namespace, "-o", "wide")
    assert "TOK/S" in wide
    assert "Complete" in wide
    scrape = (
        urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=60)
        .read()
        .decode()
    )
    series = {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(scrape)
        if family.name == "vllm_operator_benchmark_output_tokens_per_second"
        for sample in family.samples
    }
    key = (("namespace", namespace), ("revision", rev), ("service", "bench"))
    assert series[key] == pytest.approx(b["outputTokensPerSecond"])

    # a spec change is a new revision: a new run; the old result stays in the history
    cluster.kubectl(
        "patch",
        "vsvc",
        "bench",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"engine": {"maxNumSeqs": 8}}}),
    )
    job2 = next_job(cluster, namespace, after=job, what="a Job for the new revision")
    assert job2["metadata"]["name"].startswith("bench-bench-")
    runs = items(cluster, namespace, "configmaps", "app.kubernetes.io/component=benchmark")
    assert len(runs) == 2


def job_writes_while_reconciling(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str, since: float
) -> list[dict[str, Any]]:
    """The operator's writes to Jobs after `since`, once the API server has recorded at least
    three reconciles of the namespace's service after it (evidence, not a pause)."""
    wait_for(
        "three reconciles",
        lambda: reconciles_seen(audit(cluster.audit_log, operator.username, namespace, since)) >= 3,
    )
    return [
        e
        for e in audit(cluster.audit_log, operator.username, namespace, since)
        if e["objectRef"].get("resource") == "jobs" and e["verb"] != "get"
    ]


def test_restarting_the_operator_during_a_run_starts_no_second_job(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, service("restart"))
    job = job_of(cluster, namespace, "restart")
    operator.stop()
    since = time.time()
    operator.start()
    assert job_writes_while_reconciling(operator, cluster, namespace, since) == []
    jobs = items(cluster, namespace, "jobs")
    assert [j["metadata"]["uid"] for j in jobs] == [job["metadata"]["uid"]]


def test_a_newer_rollout_supersedes_a_running_benchmark(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, service("supersede"))
    old = job_of(cluster, namespace, "supersede")
    cluster.kubectl(
        "patch",
        "vsvc",
        "supersede",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"engine": {"maxNumSeqs": 8}}}),
    )

    def superseded() -> bool:
        names = [
            j["metadata"]["name"]
            for j in items(cluster, namespace, "jobs")
            if not j["metadata"].get("deletionTimestamp")
        ]
        return old["metadata"]["name"] not in names and len(names) == 1

    wait_for("the old run replaced by the new one", superseded)
    # the operator's record of the run (the Job cannot write it)
    cm = get(cluster, namespace, "configmap", f"{old['metadata']['name']}-record")
    assert cm is not None
    assert cm["data"]["state"] == "Failed"
    assert "superseded" in cm["data"]["message"]


@pytest.mark.parametrize("canary", [True, False], ids=["on-a-canary", "after-the-rollout"])
def test_a_failing_gate_with_rollback_restores_the_previous_revision_once(
    operator: OperatorProcess,
    cluster: LocalCluster,
    namespace: str,
    vllm_server: VllmServer,
    tmp_path: Path,
    canary: bool,
) -> None:
    """On a canary (rollout.canary, the default with gates) the failing revision is measured
    on a pod outside the Service and never replaces the serving pods; after the rollout
    (canary off) it is deployed, measured and rolled back. The rest is the same."""
    apply(cluster, namespace, service("gated"))
    first = job_of(cluster, namespace, "gated")
    good_rev = bench_status(cluster, namespace, "gated")["revision"]
    good_args = get(cluster, namespace, "deployment", "gated")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert play_job(cluster, namespace, first, vllm_server.url, tmp_path / "1") == 0
    wait_for(
        "the first run recorded",
        lambda: (
            (bench_status(cluster, namespace, "gated").get("benchmark") or {}).get("state")
            == "Complete"
        ),
    )
    # a new revision with a threshold it cannot meet
    cluster.kubectl(
        "patch",
        "vsvc",
        "gated",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps(
            {
                "spec": {
                    "engine": {"maxNumSeqs": 8},
                    "benchmark": {
                        "onFailure": "Rollback",
                        "thresholds": {"minOutputTokensPerSecond": 1e9},
                    },
                    "rollout": {"canary": {"enabled": canary}},
                }
            }
        ),
    )
    second = next_job(cluster, namespace, after=first, what="the second run")
    bad_rev = second["metadata"]["labels"]["serving.vllm-operator.dev/revision"]
    assert play_job(cluster, namespace, second, vllm_server.url, tmp_path / "2") == 0
    # one failed run does not roll back: a second run of the same revision confirms it
    confirmation = confirmation_of(cluster, namespace, second)
    st = bench_status(cluster, namespace, "gated")
    assert condition({"status": st}, "BenchmarkComplete")["reason"] == "ConfirmingFailure"
    assert condition({"status": st}, "Degraded")["status"] == "False"
    if canary:  # what serves is the good revision, untouched; the bad one is the canary's
        assert st["revision"] == good_rev
        assert (st["rollout"]["phase"], st["rollout"]["revision"]) == ("Canary", bad_rev)
        dep = get(cluster, namespace, "deployment", "gated")
        assert dep["spec"]["template"]["spec"]["containers"][0]["args"] == good_args
        assert next(iter(target_pods(confirmation))).startswith("gated-canary-")
    else:
        assert st["revision"] == bad_rev
    assert play_job(cluster, namespace, confirmation, vllm_server.url, tmp_path / "3") == 0

    def rolled_back() -> dict[str, Any] | None:
        st = bench_status(cluster, namespace, "gated")
        return (
            st
            if condition({"status": st}, "Degraded").get("reason") == "BenchmarkRollback"
            else None
        )

    st = wait_for("the rollback", rolled_back)
    degraded = condition({"status": st}, "Degraded")
    assert degraded["status"] == "True"
    assert "failed its benchmark gates in two runs" in degraded["message"]
    assert "outputTokensPerSecond" in degraded["message"]
    assert "< minimum 1e+09" in degraded["message"]
    assert good_rev in degraded["message"]
    assert st["revision"] == good_rev
    assert st["benchmark"]["revision"] == bad_rev
    assert st["benchmark"]["rolledBackTo"] == good_rev
    assert condition({"status": st}, "BenchmarkPassed")["status"] == "False"
    wait_for(
        "the previous pod template restored",
        lambda: (
            get(cluster, namespace, "deployment", "gated")["spec"]["template"]["spec"][
                "containers"
            ][0]["args"]
            == good_args
        ),
    )
    # (events are posted beside the reconciles, a moment after the status write)
    wait_for(
        "a Warning BenchmarkRollback event",
        lambda: any(
            e["reason"] == "BenchmarkRollback" and e["type"] == "Warning"
            for e in items(cluster, namespace, "events")
        ),
    )
    # no loop: the failed revision is neither re-applied nor re-benchmarked, over reconciles
    # the API server recorded
    quiet_since = time.time()
    assert job_writes_while_reconciling(operator, cluster, namespace, quiet_since) == []
    deployment_writes = [
        e
        for e in audit(cluster.audit_log, operator.username, namespace, quiet_since)
        if e["objectRef"].get("resource") == "deployments" and e["verb"] != "get"
    ]
    assert deployment_writes == []
    assert len(items(cluster, namespace, "jobs")) == 3
    # the three runs are in the history: the good revision's, and both of the failed one's
    runs = items(cluster, namespace, "configmaps", "app.kubernetes.io/component=benchmark")
    assert len(runs) == 3
    records = {
        cm["metadata"]["name"]: cm["data"]
        for cm in items(
            cluster, namespace, "configmaps", "app.kubernetes.io/component=benchmark-record"
        )
    }
    assert records[f"{second['metadata']['name']}-record"]["verdict"] == "Failed"
    assert records[f"{confirmation['metadata']['name']}-record"]["verdict"] == "Failed"
    dep = get(cluster, namespace, "deployment", "gated")
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"] == good_args
    assert bench_status(cluster, namespace, "gated")["revision"] == good_rev


def test_a_failed_run_that_a_second_run_does_not_confirm_rolls_nothing_back(
    operator: OperatorProcess,
    cluster: LocalCluster,
    namespace: str,
    vllm_server: VllmServer,
    tmp_path: Path,
) -> None:
    """One noisy run must not roll back a good revision: the new revision's first run is
    measured through a relay that delays every first token (it fails the TTFT gate), the
    confirmation run measures the server as it is (it passes): the revision stays."""
    gates = {"onFailure": "Rollback", "thresholds": {"maxTtftP95Seconds": 2}}
    apply(cluster, namespace, service("noisy", benchmark=gates))
    first = job_of(cluster, namespace, "noisy")
    assert play_job(cluster, namespace, first, vllm_server.url, tmp_path / "1") == 0
    wait_for(
        "the first revision passed",
        lambda: (
            condition({"status": bench_status(cluster, namespace, "noisy")}, "BenchmarkPassed").get(
                "status"
            )
            == "True"
        ),
    )
    cluster.kubectl(
        "patch",
        "vsvc",
        "noisy",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"engine": {"maxNumSeqs": 8}}}),
    )
    second = next_job(cluster, namespace, after=first, what="the new revision's run")
    new_rev = second["metadata"]["labels"]["serving.vllm-operator.dev/revision"]
    # (measured on its canary, the default with gates: the serving pods are promoted after)
    new_args = get(cluster, namespace, "deployment", "noisy-canary")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    with slow_first_byte(vllm_server.url, delay=3) as noisy_url:
        assert play_job(cluster, namespace, second, noisy_url, tmp_path / "2") == 0
    confirmation = confirmation_of(cluster, namespace, second)
    st = bench_status(cluster, namespace, "noisy")
    confirming = condition({"status": st}, "BenchmarkComplete")
    assert (confirming["status"], confirming["reason"]) == ("False", "ConfirmingFailure")
    assert "ttftP95Seconds" in confirming["message"]
    assert condition({"status": st}, "BenchmarkPassed")["reason"] == "Confirming"
    assert condition({"status": st}, "Degraded")["status"] == "False"
    # nothing rolled back, nothing promoted yet: the canary measures it again
    assert (st["rollout"]["phase"], st["rollout"]["revision"]) == ("Canary", new_rev)
    assert play_job(cluster, namespace, confirmation, vllm_server.url, tmp_path / "3") == 0

    def passed() -> dict[str, Any] | None:
        s = bench_status(cluster, namespace, "noisy")
        ok = condition({"status": s}, "BenchmarkPassed").get("status") == "True"
        return s if ok else None

    st = wait_for("the confirmation passed", passed)
    assert st["revision"] == new_rev
    assert st["benchmark"]["job"] == confirmation["metadata"]["name"]
    assert st["benchmark"]["ttftP95Seconds"] < 2
    assert "rolledBackTo" not in st["benchmark"]
    assert condition({"status": st}, "Degraded")["status"] == "False"
    assert condition({"status": st}, "BenchmarkComplete")["reason"] == "Measured"
    dep = get(cluster, namespace, "deployment", "noisy")
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"] == new_args
    records = {
        cm["metadata"]["name"]: cm["data"]
        for cm in items(
            cluster, namespace, "configmaps", "app.kubernetes.io/component=benchmark-record"
        )
    }
    first_record = records[f"{second['metadata']['name']}-record"]
    assert first_record["verdict"] == "Failed"
    assert "ttftP95Seconds" in first_record["verdictFailures"]
    assert records[f"{confirmation['metadata']['name']}-record"]["verdict"] == "Passed"
    events = items(cluster, namespace, "events")
    assert not any(e["reason"] == "BenchmarkRollback" for e in events)
    assert any(e["reason"] == "ConfirmingFailure" for e in events)


def test_disabled_benchmark_starts_no_job(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    since = time.time()
    apply(cluster, namespace, service("nobench", benchmark={"enabled": False}))
    wait_for("Ready", lambda: ready(cluster, namespace, "nobench"))
    # reconciles after the rollout completed: each would have started the run
    assert job_writes_while_reconciling(operator, cluster, namespace, time.time()) == []
    assert items(cluster, namespace, "jobs") == []
    # the positive control: the operator's writes in this namespace were recorded
    assert audit(cluster.audit_log, operator.username, namespace, since)
    st = bench_status(cluster, namespace, "nobench")
    assert "benchmark" not in st
    assert condition({"status": st}, "BenchmarkComplete") == {}


def test_a_failed_run_is_reported_and_the_service_stays_ready(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    apply(cluster, namespace, service("failing"))
    job = job_of(cluster, namespace, "failing")
    # the runner cannot reach any server: it exits non-zero and publishes what it has
    nowhere = "http://127.0.0.1:9"
    assert play_job(cluster, namespace, job, nowhere, tmp_path) != 0

    def failed() -> dict[str, Any]:
        return condition(
            {"status": bench_status(cluster, namespace, "failing")}, "BenchmarkComplete"
        )

    c = wait_for(
        "BenchmarkFailed",
        lambda: (x := failed()).get("reason") == "BenchmarkFailed" and x,
    )
    assert c["status"] == "False"
    assert c["message"]
    assert ready(cluster, namespace, "failing") is not None


def test_a_run_past_its_deadline_is_reported_as_timed_out(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, service("slow", benchmark={"timeoutSeconds": 10}))
    job_of(cluster, namespace, "slow")  # held Running by kwok: nobody plays it

    def timed_out() -> dict[str, Any]:
        return condition({"status": bench_status(cluster, namespace, "slow")}, "BenchmarkComplete")

    c = wait_for(
        "BenchmarkTimedOut",
        lambda: (x := timed_out()).get("reason") == "BenchmarkTimedOut" and x,
    )
    assert "deadline" in c["message"]
    assert ready(cluster, namespace, "slow") is not None
