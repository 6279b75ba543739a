"""Events are posted beside the reconciles: in order, never blocking the caller, dropped and
counted (not queued without bound) when the API server cannot keep up."""

from __future__ import annotations

import threading
from typing import Any

from vllm_operator import metrics
from vllm_operator.write.events import EventRecorder


def _svc(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"namespace": "ns", "name": name, "uid": f"u-{name}", "spec": "big"},
        "spec": {"model": {"id": "m"}},
    }


class Poster:
    def __init__(self, gate: threading.Event | None = None, fail_on: str = "") -> None:
        self.posted: list[tuple[str, str]] = []
        self.involved: list[dict[str, Any]] = []
        self.gate = gate
        self.fail_on = fail_on
        self.entered = threading.Event()

    def post_event(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(5)
        if reason == self.fail_on:
            raise RuntimeError("a bug in posting")
        self.posted.append((involved["metadata"]["name"], reason))
        self.involved.append(involved)


def test_events_are_posted_in_order_by_the_recorders_thread() -> None:
    poster = Poster()
    rec = EventRecorder(poster)
    rec.start()
    for i in range(5):
        rec.record(_svc("a"), "Normal", f"R{i}", "m")
    rec.stop()
    assert poster.posted == [("a", f"R{i}") for i in range(5)]
    # what an Event names, not the whole object
    assert poster.involved[0] == {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"namespace": "ns", "name": "a", "uid": "u-a"},
    }


def test_recording_does_not_wait_for_the_api_server_and_overflow_is_counted() -> None:
    gate = threading.Event()
    poster = Poster(gate)
    rec = EventRecorder(poster, capacity=2)
    rec.start()
    rec.record(_svc("a"), "Normal", "First", "m")  # taken by the thread, which then blocks
    assert poster.entered.wait(5)
    dropped = metrics.EVENTS_DROPPED._value.get()
    for reason in ("Q1", "Q2", "Over1", "Over2"):  # returns at once although nothing is posted
        rec.record(_svc("a"), "Normal", reason, "m")
    assert poster.posted == []
    assert rec.pending() == 2
    assert metrics.EVENTS_DROPPED._value.get() - dropped == 2
    gate.set()
    rec.stop()
    assert [r for _, r in poster.posted] == ["First", "Q1", "Q2"]


def test_a_failing_post_does_not_stop_the_next_ones() -> None:
    poster = Poster(fail_on="Bad")
    rec = EventRecorder(poster)
    rec.start()
    rec.record(_svc("a"), "Warning", "Bad", "m")
    rec.record(_svc("b"), "Normal", "Good", "m")
    rec.stop()
    assert poster.posted == [("b", "Good")]


def test_without_the_thread_the_caller_posts() -> None:
    poster = Poster()
    EventRecorder(poster).record(_svc("a"), "Normal", "Now", "m")
    assert poster.posted == [("a", "Now")]
