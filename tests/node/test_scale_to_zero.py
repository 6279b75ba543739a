"""Scale to zero and back without losing a request (issue 34, items 2-3), on the real node:
a CPU vLLM service with autoscaling.minReplicas 0 goes to zero after its idle period (the
node cluster's Prometheus sees no request), the namespace's holder (its own image, a real
pod) takes the Service's traffic, 200 concurrent requests (half streamed) sent at zero are
held, one replica is asked for, and every one is answered in full once the pod is Ready;
then it idles back to zero and a second burst is served the same way.

Nothing is simulated: the holder is the image scripts/build-images.sh builds, the wake is its
patch of the VLLMService through the API server, the data path is kube-proxy's."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support import get, ready, sample, wait_for
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess

pytestmark = pytest.mark.node
NAMESPACE_PREFIX = "zero"

NAME = "tiny-zero"
IDLE = 120  # autoscaling.idleSeconds: its least
SERVER = f"serving.vllm-operator.dev/service={NAME},app.kubernetes.io/component=server"


def _service() -> dict[str, Any]:
    body = sample("tiny-cpu")
    body["metadata"]["name"] = NAME
    spec = body["spec"]
    spec["benchmark"] = {"enabled": False}
    # a start probed every 2 s: the time to first token from zero is the start, not the probe
    spec["probes"] = {"periodSeconds": 2}
    spec["autoscaling"] = {
        "enabled": True,
        "minReplicas": 0,
        "maxReplicas": 1,
        "idleSeconds": IDLE,
    }
    return body


def _zero(lc: LocalCluster, ns: str) -> dict[str, Any]:
    svc = get(lc, ns, "vllmservice", NAME) or {}
    return dict(((svc.get("status") or {}).get("autoscaling") or {}).get("zero") or {})


def _pods(lc: LocalCluster, ns: str, selector: str) -> list[dict[str, Any]]:
    return list(
        json.loads(lc.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json"))["items"]
    )


class Burst:
    """`n` requests sent at once to `url` (every other one streamed), each with its time to
    first byte of the answer's content and whether it came back whole."""

    def __init__(self, url: str, n: int, timeout: float = 900) -> None:
        self.url, self.n, self.timeout = url, n, timeout
        self.results: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def _one(self, i: int, start: float) -> None:
        stream = i % 2 == 0
        body = {
            "model": "tiny",
            "prompt": f"Count to {i % 7 + 3}:",
            "max_tokens": 8,
            "temperature": 0,
            "ignore_eos": True,
            "stream": stream,
        }
        req = urllib.request.Request(
            f"{self.url}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        out: dict[str, Any] = {"i": i, "stream": stream, "ok": False}
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                if stream:
                    tokens, done = 0, False
                    for raw in r:
                        line = raw.decode().strip()
                        if line.startswith("data: {"):
                            chunk = json.loads(line[len("data: ") :])
                            if chunk.get("error"):
                                out["error"] = chunk["error"]
                                break
                            if chunk["choices"][0].get("text"):
                                out.setdefault("first", time.monotonic() - start)
                                tokens += 1
                        elif line == "data: [DONE]":
                            done = True
                    out["ok"] = done and tokens >= 1 and "error" not in out
                    out["tokens"] = tokens
                else:
                    answer = json.load(r)
                    out["first"] = time.monotonic() - start
                    out["tokens"] = answer["usage"]["completion_tokens"]
                    out["ok"] = out["tokens"] == 8
        except Exception as exc:  # noqa: BLE001  (the test counts every failure)
            out["error"] = repr(exc)
        with self._lock:
            self.results.append(out)

    def run(self) -> float:
        start = time.monotonic()
        threads = [
            threading.Thread(target=self._one, args=(i, start), daemon=True) for i in range(self.n)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.timeout + 30)
        return start

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.results if not r["ok"]]


def _why_not(lc: LocalCluster, ns: str, log: Path) -> str:
    """What a failed wait reports: the zero status, the pods, the operator's lines about it."""
    pods = [
        (
            p["metadata"]["name"],
            (p.get("status") or {}).get("phase"),
            [
                c.get("type") + "=" + c.get("status")
                for c in (p.get("status") or {}).get("conditions") or []
            ],
        )
        for p in _pods(lc, ns, "app.kubernetes.io/name")
    ]
    lines = [
        line
        for line in log.read_text(errors="replace").splitlines()
        if NAME in line or "idle" in line or "holder" in line or "Traceback" in line
    ]
    return f"zero status {_zero(lc, ns)}; pods {pods}; operator log: " + "\n".join(lines[-40:])


def _at_zero(lc: LocalCluster, ns: str, log: Path) -> None:
    """Waits for the service at zero: its phase, no server pod, the holder's slice."""
    try:
        wait_for(
            "the service to go to zero after its idle period",
            lambda: _zero(lc, ns).get("phase") == "ScaledToZero",
            timeout=IDLE + 600,
            every=3,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {_why_not(lc, ns, log)}") from exc
    wait_for("its server pods gone", lambda: not _pods(lc, ns, SERVER), timeout=300, every=2)
    wait_for(
        "the holder's EndpointSlice in the Service",
        lambda: get(lc, ns, "endpointslice", f"{NAME}-holder"),
        every=2,
    )


@pytest.mark.timeout(2400)
def test_a_service_at_zero_holds_every_request_and_serves_them_all(
    real_cluster: LocalCluster, model_namespace: str, host_operator: OperatorProcess
) -> None:
    lc, ns = real_cluster, model_namespace
    lc.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(_service()))
    wait_for("the service Ready", lambda: ready(lc, ns, NAME) or None, timeout=600, every=3)
    service = get(lc, ns, "service", NAME)
    assert service is not None
    url = f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"
    holder = _pods(lc, ns, "app.kubernetes.io/name=vllm-holder")
    assert holder, "no holder pod in the namespace"

    for burst_no, n in ((1, 200), (2, 40)):
        _at_zero(lc, ns, host_operator.log_path)
        burst = Burst(url, n)
        burst.run()
        failed = burst.failed
        assert not failed, f"burst {burst_no}: {len(failed)} of {n} failed: {failed[:3]}"
        assert len(burst.results) == n
        wait_for("the service Serving again", lambda: _zero(lc, ns).get("phase") == "Serving")
        status = (get(lc, ns, "vllmservice", NAME) or {})["status"]
        load = status["startup"]["last"]["loadSeconds"]
        first = min(r["first"] for r in burst.results)
        slowest_first = max(r["first"] for r in burst.results)
        print(
            f"\nburst {burst_no}: {n} requests at zero, 0 failed; first token from zero "
            f"{first:.1f} s (slowest {slowest_first:.1f} s) vs the pod's loadSeconds {load:.1f}; "
            f"startup {json.dumps(status['startup']['last'], sort_keys=True)}"
        )
        # (the time to first token from zero against the pod's start is a figure to report,
        # not a timed assertion: printed above; the goal is loadSeconds + 5 s)
        assert first > 0
