"""Small helpers the test tiers share: polling and kubectl as JSON."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from vllm_localenv.cluster import REPO_ROOT, LocalCluster

SAMPLES = REPO_ROOT / "crds" / "samples"
# the operators the session's fixtures started (a test that needs to be the only operator of
# the cluster stops and restarts them)
SESSION_OPERATORS: list[Any] = []


def setup_missing(message: str) -> NoReturn:
    """A tool or image that `make setup` provides is missing: a failure under CI (where
    setup ran, so its absence is a defect of the install path), a skip on a developer's
    machine that has not run that part of the setup."""
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI: `make setup` should have provided it)")
    pytest.skip(message)


# the default deadline of a wait: the event usually comes in seconds, but on a loaded 2-core CI
# machine a reconcile, a kwok pod or a scrape can take a minute (a wait returns as soon as it
# comes, so a generous bound costs nothing when all is well)
WAIT_SECONDS = 180

# a gated benchmark a CPU vLLM pod of the tiny model runs in a minute or two (8 streamed
# requests of 16 tokens), with a gate it passes (TTFT p95 under 120 s): the real-node tests'
# and benchmarks' rollouts that must be measured, not judged
CPU_BENCH: dict[str, Any] = {
    "enabled": True,
    "scenarios": ["streaming"],
    "timeoutSeconds": 900,
    "onFailure": "Rollback",
    "args": ["--streaming-requests", "8", "--output-tokens", "16", "--warmup-requests", "1"],
    "thresholds": {"maxTtftP95Seconds": 120},
}


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = WAIT_SECONDS, every: float = 0.5
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")


def through_renewals(
    lease: Callable[[], dict[str, Any]],
    rounds: int,
    check: Callable[[], None],
    every: float,
) -> None:
    """Runs `check` until the Lease (`lease()`: its spec) has been renewed `rounds` more times
    (a round of its holder's elector each, a standby's rounds beside them on the same period):
    rounds that demonstrably ran, not a pause. Polls every `every` seconds."""
    seen: set[str] = set()
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        check()
        seen.add(lease()["renewTime"])
        if len(seen) > rounds:
            return
        assert time.monotonic() < deadline, f"{len(seen) - 1} renewals of the Lease, not {rounds}"
        time.sleep(every)


def post_accepted(url: str, body: dict[str, Any], timeout: float = 120) -> dict[str, Any] | None:
    """POSTs `body` as JSON and returns the JSON answer, or None while the address refuses
    connections: a Service whose Ready pod is in its endpoints already, but whose rules
    kube-proxy programs a sync later (wait_for it: a refusal is seen on loaded CI runs)."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return dict(json.load(r))
    except urllib.error.URLError as e:
        if isinstance(e.reason, ConnectionRefusedError):
            return None
        raise


def sample(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((SAMPLES / f"{name}.yaml").read_text()))


def apply(cluster: LocalCluster, namespace: str, manifest: dict[str, Any] | Path) -> None:
    if isinstance(manifest, Path):
        cluster.kubectl("apply", "-n", namespace, "-f", str(manifest))
    else:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(manifest))


def get(cluster: LocalCluster, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    out = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def items(
    cluster: LocalCluster, namespace: str, kind: str, selector: str = ""
) -> list[dict[str, Any]]:
    args = ["get", kind, "-n", namespace, "-o", "json"]
    if selector:
        args += ["-l", selector]
    return list(json.loads(cluster.kubectl(*args))["items"])


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for c in (obj or {}).get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return dict(c)
    return {}


def ready(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The VLLMService when Ready=True for its current generation, else None."""
    svc = get(cluster, namespace, "vllmservice", name)
    if svc is None:
        return None
    c = condition(svc, "Ready")
    gen = svc["metadata"]["generation"]
    if c.get("status") == "True" and svc["status"].get("observedGeneration") == gen:
        return svc
    return None


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


WRITE_VERBS = ("create", "update", "patch", "delete")


def audit(audit_log: Path, username: str, namespace: str, since: float) -> list[dict[str, Any]]:
    """What `username` did in `namespace` after `since` (epoch seconds), as the API server
    recorded it (writes, and reads of Deployments: proof that a reconcile ran)."""
    out = []
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") != username:
            continue
        if event.get("objectRef", {}).get("namespace") != namespace:
            continue
        stamp = dt.datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00"))
        if stamp.timestamp() >= since:
            out.append(event)
    return out


def reconciles_seen(events: list[dict[str, Any]]) -> int:
    """Reconciles in an audit excerpt: each reads its Deployment once."""
    return sum(
        1 for e in events if e["verb"] == "get" and e["objectRef"].get("resource") == "deployments"
    )


def deployment_reads(events: list[dict[str, Any]]) -> Counter[str]:
    """Reconciles in an audit excerpt, by service: each reads its Deployment (the service's
    name) once from the API server (the second look, after writes, is the watch cache's)."""
    return Counter(
        str(e["objectRef"].get("name"))
        for e in events
        if e["verb"] == "get" and e["objectRef"].get("resource") == "deployments"
    )


def wait_reconciled(
    cluster: LocalCluster,
    username: str,
    namespace: str,
    names: Sequence[str],
    times: int,
    since: float,
    timeout: float = WAIT_SECONDS,
) -> list[dict[str, Any]]:
    """Waits until `username` (an operator) has run `times` whole reconciles of each service
    of `names` after `since` (epoch seconds), as the API server's audit log records them:
    evidence that the operator ran, not a pause. A service's reconciles never overlap (the
    work queue hands its key to one worker at a time), so the Deployment read of reconcile
    `times + 1` ends reconcile `times`. Returns what `username` did in `namespace` since."""

    def seen() -> list[dict[str, Any]] | None:
        mine = audit(cluster.audit_log, username, namespace, since)
        reads = deployment_reads(mine)
        return mine if all(reads[n] > times for n in names) else None

    return list(
        wait_for(f"{times} reconciles of each of {list(names)} by {username}", seen, timeout)
    )


def quiet_window(
    cluster: LocalCluster,
    username: str,
    namespace: str,
    names: Sequence[str],
    reconciles: int = 3,
    timeout: float = WAIT_SECONDS,
) -> list[dict[str, Any]]:
    """What `username` did in `namespace` over `reconciles` whole reconciles of each service of
    `names` (see wait_reconciled), for a caller that asserts it wrote nothing. First the work in
    flight settles: one whole reconcile of each service from now (so a reconcile under way now
    has ended, and the Events it handed over, posted beside the reconciles, have had a resync
    period to go out), then the window opens and lasts until `reconciles` more have ended."""
    wait_reconciled(cluster, username, namespace, names, 1, time.time(), timeout)
    return wait_reconciled(cluster, username, namespace, names, reconciles, time.time(), timeout)


def stream_completion(url: str, max_tokens: int = 16) -> None:
    """One streamed completion of the tiny model through `url` (a Service's base URL); raises
    OSError (or http.client's errors, a cut stream) unless the stream ends with [DONE] and
    carries no error event (vLLM ends a stream whose engine died mid-request with an error
    chunk, then [DONE], under an HTTP 200)."""
    body: dict[str, Any] = {
        "model": "tiny",
        "prompt": "Hello there",
        "max_tokens": max_tokens,
        "stream": True,
    }
    if max_tokens != 16:  # (a longer request: every token of it, whatever the model samples)
        body["ignore_eos"] = True
    req = urllib.request.Request(
        f"{url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        lines = r.read().decode().splitlines()
    if "data: [DONE]" not in lines:
        raise OSError(f"the stream ended without [DONE]: {lines[-3:]}")
    errors = [line for line in lines if line.startswith('data: {"error"')]
    if errors:
        raise OSError(f"the stream carried an error: {errors[0][:300]}")
