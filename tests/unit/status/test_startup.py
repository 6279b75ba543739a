"""A pod's start, read once (observe/startup.py) and shown per revision (status/startup.py),
on vLLM's own log of a real start (an H100, vLLM 0.26.0: benchmarks/gpu/results/logs)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

from vllm_operator.observe.startup import engine_figures, pod_start, pull_seconds
from vllm_operator.reconcile import _slow_starts
from vllm_operator.status.startup import _startup

FIGURES = ("weightsSeconds", "modelLoadSeconds", "compileSeconds", "graphCaptureSeconds")
LOG = (
    Path(__file__).resolve().parents[3]
    / "benchmarks/gpu/results/logs/issue35-h100/vllm-llama3-8b-2048.log"
)


def pod(
    name: str, uid: str, created: str, ready: str, ready_status: str = "True"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid, "creationTimestamp": created},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": created[:-3] + "02Z",
                },
                {"type": "Ready", "status": ready_status, "lastTransitionTime": ready},
            ],
            "containerStatuses": [
                {
                    "name": "vllm",
                    "restartCount": 0,
                    "state": {"running": {"startedAt": created[:-3] + "10Z"}},
                }
            ],
        },
    }


def test_vllms_own_figures_are_read_from_a_real_log() -> None:
    figures = engine_figures(LOG.read_text())
    assert figures["weightsSeconds"] == 1.88
    assert figures["modelLoadSeconds"] == 4.36706
    assert figures["compileSeconds"] == 23.88
    assert figures["graphCaptureSeconds"] == 5.0
    assert figures["engineInitSeconds"] == 55.94
    # its first line (19:43:48) to "Application startup complete." (after 19:45:21)
    assert 90 <= figures["serverSeconds"] <= 120, figures
    assert engine_figures("no vLLM here") == {}


def test_a_pods_phases_from_its_stamps_its_pulled_event_and_its_log() -> None:
    events = [
        {"reason": "Pulling", "message": 'Pulling image "vllm"'},
        {
            "reason": "Pulled",
            "message": 'Successfully pulled image "vllm" in 2.5s (2.5s including waiting)',
        },
    ]
    p = pod("a", "u1", "2030-01-01T00:00:00Z", "2030-01-01T00:02:10Z")
    start = pod_start(p, "rev1", "vllm", events, LOG.read_text())
    assert start is not None
    assert start.load_seconds == 130
    assert start.phases["scheduledSeconds"] == 2
    assert start.phases["imagePullSeconds"] == 2.5
    assert start.phases["containerStartedSeconds"] == 8
    assert start.phases["readySeconds"] == 120
    assert start.phases["engineInitSeconds"] == 55.94
    assert (
        pull_seconds(
            [{"reason": "Pulled", "message": "Container image already present on machine"}]
        )
        == 0
    )
    assert (
        pull_seconds([{"reason": "Pulled", "message": "Successfully pulled image x in 850ms"}])
        == 0.85
    )
    # not Ready: no start yet
    assert pod_start(pod("b", "u2", "2030-01-01T00:00:00Z", "x", "False"), "rev1", "vllm") is None


def test_starts_are_recorded_once_per_revision_and_a_slow_one_is_marked() -> None:
    def start(uid: str, minute: int, load_minutes: int) -> Any:
        created = f"2030-01-01T00:{minute:02d}:00Z"
        ready = f"2030-01-01T00:{minute + load_minutes:02d}:00Z"
        s = pod_start(pod(uid, uid, created, ready), "rev1", "vllm")
        assert s is not None
        return s

    one = _startup(None, [start("a", 0, 2)], 1.5)
    assert one is not None
    assert one["last"]["loadSeconds"] == 120
    assert one["revisions"] == [
        {
            "revision": "rev1",
            "starts": 1,
            "lastLoadSeconds": 120,
            "medianLoadSeconds": 120,
            "slowestLoadSeconds": 120,
            "slowestReadySeconds": 110,  # (the fixture's container starts 10 s after creation)
        }
    ]
    # the same start again (a second look of the same reconcile): not counted twice
    assert _startup(one, [start("a", 0, 2)], 1.5) == one
    two = _startup(one, [start("b", 10, 2)], 1.5)
    assert two is not None
    assert "slowerThanUsual" not in two["last"]
    slow = _startup(two, [start("c", 20, 5)], 1.5)
    assert slow is not None
    assert slow["last"]["slowerThanUsual"] == 2.5
    assert slow["revisions"][0]["starts"] == 3
    assert slow["revisions"][0]["slowestLoadSeconds"] == 300
    # one Warning, when the slow start is first recorded
    events = _slow_starts({"startup": two}, {"startup": slow})
    assert [e.reason for e in events] == ["SlowStart"]
    assert "2.5x the median" in events[0].message
    assert _slow_starts({"startup": slow}, {"startup": slow}) == []


def kubelet_stamped(log: str, year: int = 2026) -> str:
    """The log as the API server answers with timestamps=true: each line after the kubelet's
    RFC 3339 stamp (here: vLLM's own stamp of the line, or the last one's, plus 0.25 s)."""
    out, last = [], None
    for line in log.splitlines():
        if m := re.search(r"INFO (\d\d)-(\d\d) (\d\d:\d\d:\d\d)", line):
            last = f"{year}-{m[1]}-{m[2]}T{m[3]}.250000000Z"
        out.append(f"{last or f'{year}-12-06T19:43:48.000000000Z'} {line}")
    return "\n".join(out)


def test_the_kubelets_stamps_give_imports_the_servers_own_ready_and_the_probes_lag() -> None:
    plain = LOG.read_text()
    stamped = kubelet_stamped(plain)
    # the container started 20 s before vLLM's first line (19:43:48); Ready came 7 s after
    # "Application startup complete." (its line stamped as the line before it: 19:45:21.25)
    started = dt.datetime(2026, 12, 6, 19, 43, 28, tzinfo=dt.UTC)
    ready = dt.datetime(2026, 12, 6, 19, 45, 28, 250000, tzinfo=dt.UTC)
    figures = engine_figures(stamped, started, ready)
    # vLLM's own figures are read through the stamps unchanged
    assert {k: v for k, v in figures.items() if k in FIGURES} == {
        k: v for k, v in engine_figures(plain).items() if k in FIGURES
    }
    assert figures["importSeconds"] == 20.25
    assert figures["serverSeconds"] == 93.0  # 19:43:48.25 -> 19:45:21.25
    assert figures["serverReadySeconds"] == 113.25
    assert figures["probeLagSeconds"] == 7.0
    # without the kubelet's stamps: serverSeconds from vLLM's, the container timeline unknown
    unstamped = engine_figures(plain, started, ready)
    assert unstamped["serverSeconds"] == 93.0
    assert not {"importSeconds", "serverReadySeconds", "probeLagSeconds"} & unstamped.keys()
    # a pod read through pod_start carries them in its phases
    p = pod("a", "u1", "2026-12-06T19:43:00Z", "2026-12-06T19:45:28Z")
    p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] = "2026-12-06T19:43:28Z"
    start = pod_start(p, "rev1", "vllm", (), stamped)
    assert start is not None
    assert start.phases["probeLagSeconds"] == 6.75  # (Ready's stamp is to the second)
    assert start.phases["importSeconds"] == 20.25
