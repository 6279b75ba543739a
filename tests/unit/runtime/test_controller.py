"""The controller's glue between events, the queue and the reconcile: which service events
wake a reconcile, the gate of leader election, and how results are re-queued."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.fake_api import FakeApi
from vllm_operator import metrics
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.reconcile import Outcome
from vllm_operator.runtime.controller import Controller, Result


def _controller() -> Controller:
    settings = OperatorSettings(resync_seconds=60)
    return Controller(settings, FakeApi(settings), FakeApi(settings), workers=1)


def _body(generation: int = 1, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": "svc",
            "uid": "u1",
            "generation": generation,
            "annotations": annotations or {},
        },
        "status": {"conditions": []},
    }


def _drain(c: Controller) -> list[tuple[str, str]]:
    out = []
    while (key := c.queue.get(timeout=0)) is not None:
        out.append(key)
        c.queue.done(key)
    return out


def test_only_what_a_reconcile_reacts_to_wakes_it() -> None:
    c = _controller()
    c.service_event(None, _body())  # kopf's initial listing
    assert _drain(c) == [("ns", "svc")]
    status_written = _body()
    status_written["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    c.service_event("MODIFIED", status_written)  # the reconcile's own status write
    assert _drain(c) == []
    c.service_event("MODIFIED", _body(generation=2))  # a spec change
    assert _drain(c) == [("ns", "svc")]
    c.service_event("MODIFIED", _body(2, {"serving.vllm-operator.dev/rerun-benchmark": "1"}))
    assert _drain(c) == [("ns", "svc")]


def test_a_deleted_service_is_forgotten() -> None:
    c = _controller()
    c.service_event(None, _body())
    _drain(c)
    c.queue.add_rate_limited(("ns", "svc"))
    c.service_event("DELETED", _body())
    assert c.queue.pending() == 0
    assert c.queue.failures(("ns", "svc")) == 0
    c.set_active(True)
    assert _drain(c) == []  # not known any more


def test_opening_the_gate_queues_every_known_service() -> None:
    c = _controller()
    for name in ("a", "b"):
        body = _body()
        body["metadata"]["name"] = name
        c.service_event(None, body)
    _drain(c)
    assert not c.active.is_set()
    c.set_active(True)
    assert c.active.is_set()
    assert sorted(_drain(c)) == [("ns", "a"), ("ns", "b")]
    c.set_active(False)
    assert not c.active.is_set()


@pytest.mark.parametrize(
    ("result", "failures", "delay_at_most"),
    [(Result.OK, 0, 60), (Result.INVALID, 0, 60), (Result.FAILED, 1, 5), (Result.GONE, 0, None)],
)
def test_results_are_requeued_after_the_resync_or_the_back_off(
    monkeypatch: pytest.MonkeyPatch, result: Result, failures: int, delay_at_most: float | None
) -> None:
    c = _controller()
    clock = [1000.0]
    c.queue._clock = lambda: clock[0]
    monkeypatch.setattr(c, "reconcile_key", lambda key: result)
    c._process(("ns", "svc"))
    assert c.queue.failures(("ns", "svc")) == failures
    if delay_at_most is None:
        assert c.queue.pending() == 0
        return
    assert c.queue.pending() == 1
    clock[0] += delay_at_most
    assert c.queue.get(timeout=0) == ("ns", "svc")


def test_a_bug_in_a_reconcile_is_a_failure_not_a_dead_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c = _controller()

    def broken(key: tuple[str, str]) -> Result:
        raise KeyError("status")

    monkeypatch.setattr(c, "reconcile_key", broken)
    c._process(("ns", "svc"))
    assert c.queue.failures(("ns", "svc")) == 1


def test_a_service_that_is_gone_is_not_reconciled() -> None:
    c = _controller()
    assert c.reconcile_key(("ns", "absent")) is Result.GONE


def _series(gauge: Any, namespace: str = "ns", service: str = "svc") -> list[tuple[str, ...]]:
    return [
        tuple(s.labels.values())
        for m in gauge.collect()
        for s in m.samples
        if (s.labels.get("namespace"), s.labels.get("service")) == (namespace, service)
    ]


def test_a_deposed_leader_stops_exporting_the_per_service_gauges() -> None:
    """VLLMRolledBack reads vllm_operator_rollback_active: a replica that stops leading must
    not keep exporting the rollback it last saw once the new leader has cleared it."""
    c = _controller()
    c.set_active(True)
    assert c._record("ns", "svc", Outcome(rolled_back_to="r1", scaling_active="True")) is Result.OK
    assert _series(metrics.ROLLBACK_ACTIVE) == [("ns", "svc", "r1")]  # positive control
    assert _series(metrics.AUTOSCALER_SCALING_ACTIVE) == [("ns", "svc")]
    c.set_active(False)
    assert _series(metrics.ROLLBACK_ACTIVE) == []
    assert _series(metrics.AUTOSCALER_SCALING_ACTIVE) == []
    # a reconcile that was in flight when the gate closed publishes nothing afterwards
    assert c._record("ns", "svc", Outcome(rolled_back_to="r1")) is Result.OK
    assert _series(metrics.ROLLBACK_ACTIVE) == []
    c.set_active(True)  # leading again: the next reconcile publishes afresh
    c._record("ns", "svc", Outcome(rolled_back_to="r2"))
    assert _series(metrics.ROLLBACK_ACTIVE) == [("ns", "svc", "r2")]
    c.set_active(False)
