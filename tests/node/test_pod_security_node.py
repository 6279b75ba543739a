"""Pod Security "restricted" on the real node, nothing simulated: in a namespace that enforces
it, the pod template the operator renders starts as the operator's uid and as an arbitrary
one, neither in the image's passwd, and finds what vLLM, torch and Triton ask for at start.
That the real server itself serves under restricted, as uid 65532 with its caches in the
HOME emptyDir, is checked where a CPU sample is served under restricted anyway (the chart's
test, tests/node/test_helm_chart.py: one vLLM start fewer on the node tier).

Run it alone, holding the host's real-node lock:
  flock /tmp/vllm-real-node.lock scripts/run-tests.sh tests/node/test_pod_security_node.py
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from tests.node.conftest import quiet_in_cluster_operator
from tests.support import items, post_accepted, sample, wait_for
from vllm_localenv import model_volume
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess, install
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.render.deployment import render_pod_template

pytestmark = pytest.mark.node
NAME = "tiny-restricted"


@pytest.fixture
def restricted_namespace(
    real_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalCluster, str]]:
    lc = real_cluster
    install(lc)
    op = OperatorProcess(
        lc,
        tmp_path_factory.mktemp("operator") / "operator.log",
        extra_env={"VLLM_OPERATOR_CPU_IMAGE": "localhost/vllm-cpu:0.32.0"},
    )
    ns = f"pss-{uuid.uuid4().hex[:8]}"
    lc.kubectl("create", "namespace", ns)
    lc.kubectl(
        "label",
        "namespace",
        ns,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )
    model_volume.create(lc, ns)
    try:
        with quiet_in_cluster_operator(lc):  # (the operator acting is this one)
            op.start()
            try:
                yield lc, ns
            finally:
                op.stop()
    finally:
        lc.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        model_volume.delete(lc, ns)


def assert_serves_as_non_root(lc: LocalCluster, ns: str, name: str) -> str:
    """The service's one vLLM pod runs under the restricted securityContext the operator
    renders: non-root, never restarted, uid/gid 65532 for the server (PID 1) and an exec'd
    probe, HOME writable, and it answers a completion. Returns a line for the test's log."""
    server = f"serving.vllm-operator.dev/service={name},app.kubernetes.io/component=server"
    (pod,) = items(lc, ns, "pods", server)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"], status
    assert status["restartCount"] == 0, status
    # who the server runs as, and where its caches went, seen from inside the pod
    probe = (
        "import os, pathlib; h = pathlib.Path(os.environ['HOME']); "
        "print(os.getuid(), os.getgid(), h, os.access(h, os.W_OK), "
        "sorted(p.name for p in h.iterdir()))"
    )
    out = lc.kubectl("exec", "-n", ns, pod["metadata"]["name"], "--", "python3", "-c", probe)
    uid, gid, home, writable, listing = out.strip().split(maxsplit=4)
    assert (uid, gid, home, writable) == ("65532", "65532", "/root", "True"), out
    # PID 1 (the server) too, not only the exec'd probe
    status_1 = lc.kubectl("exec", "-n", ns, pod["metadata"]["name"], "--", "cat", "/proc/1/status")
    uids = next(line for line in status_1.splitlines() if line.startswith("Uid:")).split()[1:]
    assert set(uids) == {"65532"}, uids

    service = json.loads(lc.kubectl("get", "service", name, "-n", ns, "-o", "json"))
    base = f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"
    # the Ready pod is in the Service's endpoints at once, but kube-proxy programs its rules a
    # sync later (a refused connection until then: seen on a loaded CI run): wait for it
    done = wait_for(
        f"the Service's address {base} to take connections (kube-proxy's rules)",
        lambda: post_accepted(
            f"{base}/v1/completions", {"model": "tiny", "prompt": "Hello", "max_tokens": 8}
        ),
        every=1,
    )
    assert done["usage"]["completion_tokens"] == 8
    return f"served as uid {uid} under restricted; HOME {home} holds {listing}"


# What vLLM, torch and Triton write at start-up, asked for as the server would: the user name
# (torch < 2.13's inductor cache, getpass.getuser()), the inductor and Triton caches, vLLM's
# and FlashInfer's caches under ~/.cache, the Hugging Face cache; torch's own cache lookups
PROBE = """
import getpass, os, pathlib
print("user", getpass.getuser(), os.getuid(), flush=True)
home = pathlib.Path(os.environ["HOME"])
for path in (os.environ["TORCHINDUCTOR_CACHE_DIR"], os.environ["TRITON_CACHE_DIR"],
             home / ".cache" / "vllm", home / ".cache" / "flashinfer", os.environ["HF_HOME"]):
    p = pathlib.Path(path)
    p.mkdir(parents=True, exist_ok=True)
    (p / "probe").write_text("x")
import torch._inductor.codecache, torch._dynamo.convert_frame
print("ok", flush=True)
"""


def _probe_pod(
    lc: LocalCluster, ns: str, name: str, uid: int, *, without_between: bool = False
) -> tuple[str, str]:
    """The operator's rendered pod template (a service whose HF cache mount lies inside
    HOME), with the server's command replaced by PROBE, run once as `uid` (no passwd entry in
    the image for it). `without_between`: the rendering before the fix (no emptyDir at the
    folders between HOME and a mount below it). (phase, log)."""
    body = sample("tiny-cpu")
    body["metadata"].update(name=name, namespace=ns, uid="u", generation=1)
    body["spec"]["modelCache"] = {"type": "EmptyDir"}  # HF_HOME=/root/.cache/huggingface
    settings = OperatorSettings(cpu_image="localhost/vllm-cpu:0.32.0")
    template = render_pod_template(Service.from_body(body), settings)
    spec = template["spec"]
    (ctr,) = spec["containers"]
    ctr.update(command=["python3", "-c", PROBE], args=[])
    # a probe, not a server: room beside the other pods of the real node
    ctr["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        ctr.pop(probe, None)
    ctr.pop("lifecycle", None)
    if without_between:
        between = {v["name"] for v in spec["volumes"] if v["name"].startswith("home-")}
        assert between, "the rendering has no folder between HOME and a mount: nothing to drop"
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in between]
        ctr["volumeMounts"] = [m for m in ctr["volumeMounts"] if m["name"] not in between]
    spec["securityContext"].update(runAsUser=uid, runAsGroup=uid, fsGroup=uid)
    spec["restartPolicy"] = "Never"
    spec["volumes"] = [
        v if v["name"] != "model" else {"name": "model", "emptyDir": {}} for v in spec["volumes"]
    ]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    lc.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(pod))

    def finished() -> str | None:
        got = json.loads(lc.kubectl("get", "pod", name, "-n", ns, "-o", "json"))
        phase = got.get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(f"pod {name} to finish", finished, timeout=300, every=1)
    return phase, lc.kubectl("logs", "-n", ns, name)


@pytest.mark.timeout(900)
def test_the_rendered_pod_starts_as_any_uid_without_a_passwd_entry(
    restricted_namespace: tuple[LocalCluster, str],
) -> None:
    """On a real kubelet and runc, under Pod Security restricted: the uid the operator sets
    (65532) and an arbitrary one as OpenShift assigns (1000680000), neither in the image's
    passwd, find a user name and can write every cache vLLM, torch and Triton create at start.
    The positive control: without the emptyDir at /root/.cache (the rendering before the H200
    run found it), runc creates that folder as root to mount the HF cache into, and the cache
    writes fail."""
    lc, ns = restricted_namespace
    for uid in (65532, 1000680000):
        phase, log = _probe_pod(lc, ns, f"probe-{uid}", uid)
        assert phase == "Succeeded", log
        assert f"user vllm {uid}" in log, log
        assert log.strip().endswith("ok"), log
    phase, log = _probe_pod(lc, ns, "probe-before-fix", 1000680000, without_between=True)
    assert phase == "Failed", log
    assert "PermissionError" in log, log
    assert "/root/.cache" in log, log
