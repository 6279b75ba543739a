"""The leader election's decisions (leader.decide, written, remaining) with a fake clock, and a
simulation of two candidates against an in-memory Lease with optimistic concurrency."""

from __future__ import annotations

import datetime as dt
import random
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import urllib3
from kubernetes import client
from pydantic import ValidationError

from vllm_operator.api.settings import OperatorSettings
from vllm_operator.runtime.leader import (
    Action,
    LeaderElector,
    Lease,
    Memory,
    NotLeaderError,
    Timing,
    decide,
    desired,
    lease_namespace,
    remaining,
    written,
)
from vllm_operator.write.transport import ApplyError

T = Timing(lease_duration=15, renew_deadline=10, retry_period=2)


def lease(holder: str, renew: str = "r1", transitions: int = 0, rv: str = "1") -> Lease:
    return Lease(holder, renew, 15.0, transitions, "a0", rv)


def test_no_lease_is_created() -> None:
    assert decide("a", None, Memory(), 0.0, T) == (Action.CREATE, Memory())


def test_our_own_lease_is_renewed() -> None:
    mem = Memory(seen=("a", "r1", 0), seen_at=3.0, renewed_at=3.0)
    assert decide("a", lease("a"), mem, 5.0, T) == (Action.RENEW, mem)


def test_a_standby_waits_for_the_full_lease_duration_on_its_own_clock() -> None:
    action, mem = decide("b", lease("a"), Memory(), 100.0, T)
    assert action is Action.WAIT
    assert mem.seen_at == 100.0  # the first observation starts the count, not renewTime
    action, mem = decide("b", lease("a"), mem, 114.9, T)
    assert action is Action.WAIT
    assert mem.seen_at == 100.0
    action, mem = decide("b", lease("a"), mem, 115.0, T)
    assert action is Action.ACQUIRE


def test_a_renewal_restarts_the_standbys_count() -> None:
    _, mem = decide("b", lease("a", renew="r1"), Memory(), 100.0, T)
    action, mem = decide("b", lease("a", renew="r2"), mem, 114.0, T)
    assert (action, mem.seen_at) == (Action.WAIT, 114.0)
    assert decide("b", lease("a", renew="r2"), mem, 128.9, T)[0] is Action.WAIT


def test_a_longer_lease_of_the_holder_is_waited_for() -> None:
    long = Lease("a", "r1", 60.0, 0, "a0", "1")
    _, mem = decide("b", long, Memory(), 0.0, T)
    assert decide("b", long, mem, 59.0, T)[0] is Action.WAIT
    assert decide("b", long, mem, 60.0, T)[0] is Action.ACQUIRE


def test_a_released_lease_is_taken_at_once() -> None:
    assert decide("b", lease(""), Memory(), 0.0, T)[0] is Action.ACQUIRE


def test_a_holder_that_sees_another_holder_stops_at_once() -> None:
    mem = Memory(seen=("a", "r1", 0), seen_at=0.0, renewed_at=1.0)
    action, mem = decide("a", lease("b", transitions=1), mem, 2.0, T)
    assert action is Action.WAIT
    assert remaining(mem, 2.0, T) == 0.0


def test_the_fence_closes_at_the_renew_deadline_after_the_send_time() -> None:
    mem = written(Memory(), lease("a"), sent_at=50.0)
    assert remaining(mem, 50.0, T) == 10.0
    assert remaining(mem, 59.5, T) == 0.5
    assert remaining(mem, 60.0, T) <= 0
    assert remaining(Memory(), 0.0, T) <= 0


def test_desired_lease_specs() -> None:
    wall = dt.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=dt.UTC)
    stamp = "2026-11-30T12:00:00.123456Z"
    assert desired("b", Action.ACQUIRE, lease("a", transitions=3), wall, T) == {
        "holderIdentity": "b",
        "leaseDurationSeconds": 15,
        "renewTime": stamp,
        "acquireTime": stamp,
        "leaseTransitions": 4,
    }
    renew = desired("a", Action.RENEW, lease("a", transitions=3), wall, T)
    assert (renew["acquireTime"], renew["leaseTransitions"]) == ("a0", 3)
    assert desired("a", Action.CREATE, None, wall, T)["leaseTransitions"] == 0


def test_fence_is_an_apply_error_naming_the_lease() -> None:
    now = [0.0]
    settings = OperatorSettings(lease_namespace="ops")
    elector = LeaderElector(client.ApiClient(), settings, identity="a", clock=lambda: now[0])
    with pytest.raises(NotLeaderError, match=r"Lease ops/vllm-operator") as err:
        elector.fence()
    assert isinstance(err.value, ApplyError)
    assert not err.value.permanent
    elector._memory = written(Memory(), lease("a"), sent_at=0.0)
    assert elector.is_leader()
    assert elector.fence() == 10.0
    now[0] = 10.0
    assert not elector.is_leader()
    with pytest.raises(NotLeaderError):
        elector.fence()
    assert elector.api.user_agent == "vllm-operator (a)"


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"lease_duration_seconds": 10, "renew_deadline_seconds": 10}, "lease_duration_seconds"),
        ({"renew_deadline_seconds": 2, "retry_period_seconds": 2}, "renew_deadline_seconds"),
    ],
)
def test_inconsistent_timings_are_refused_naming_the_field(
    env: dict[str, float], field: str
) -> None:
    with pytest.raises(ValidationError, match=field):
        OperatorSettings(**env)  # type: ignore[arg-type]


# ---- two candidates, one Lease ----------------------------------------------------------


@dataclass
class Store:
    """An in-memory Lease with resourceVersion checks (the API server's part)."""

    lease: Lease | None = None
    rv: int = 0

    def write(self, expected_rv: str | None, spec: dict[str, object]) -> Lease:
        current = self.lease.resource_version if self.lease else None
        if expected_rv != current:
            raise RuntimeError("409 Conflict")
        self.rv += 1
        self.lease = Lease(
            str(spec["holderIdentity"]),
            str(spec["renewTime"]),
            float(spec["leaseDurationSeconds"]),  # type: ignore[arg-type]
            int(spec["leaseTransitions"]),  # type: ignore[call-overload]
            str(spec["acquireTime"]),
            str(self.rv),
        )
        return self.lease


@dataclass
class Candidate:
    name: str
    rate: float  # this candidate's monotonic clock runs at `rate` times real time
    memory: Memory = field(default_factory=Memory)
    partitioned_from: float = float("inf")
    partitioned_until: float = float("inf")

    def clock(self, real: float) -> float:
        return real * self.rate

    def cut(self, real: float) -> bool:
        return self.partitioned_from <= real < self.partitioned_until


def _round(c: Candidate, store: Store, real: float, latency: float, timing: Timing) -> None:
    """Read at `real`, write `latency` later; the write is committed `latency` after it was
    sent. A partitioned candidate reaches nothing."""
    if c.cut(real):
        return
    read = store.lease
    action, c.memory = decide(c.name, read, c.memory, c.clock(real), timing)
    if action is Action.WAIT:
        return
    sent = real + latency
    wall = dt.datetime(2030, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=sent)
    spec = desired(c.name, action, read, wall, timing)
    if c.cut(sent + latency):
        return
    try:
        new = store.write(read.resource_version if read else None, spec)
    except RuntimeError:
        return
    c.memory = written(c.memory, new, c.clock(sent))


def _simulate(seed: int, timing: Timing) -> tuple[set[str], float]:
    """Two candidates for 120 s; the leaders seen and the first cut-off's length. Raises
    AssertionError at the first moment both may write."""
    rng = random.Random(seed)
    # clock rates within 1 %; one candidate is cut off from the API server for a while
    a = Candidate("a", rate=rng.uniform(0.99, 1.01))
    b = Candidate("b", rate=rng.uniform(0.99, 1.01))
    cut_at, cut_for = rng.uniform(5, 40), rng.uniform(0, 40)
    store = Store()
    leaders_seen: set[str] = set()
    next_round = {"a": rng.uniform(0, 2), "b": rng.uniform(0, 2)}
    real = 0.0
    while real < 120:
        real = round(real + 0.05, 2)
        if cut_at <= real and store.lease and cut_at < float("inf"):  # cut off the holder
            holder = a if store.lease.holder == "a" else b
            holder.partitioned_from, holder.partitioned_until = real, real + cut_for
            cut_at = float("inf")
        for c in (a, b):
            if real >= next_round[c.name]:
                _round(c, store, real, rng.uniform(0, 0.5), timing)
                next_round[c.name] = real + timing.retry_period + rng.uniform(0, 0.3)
        open_ = [c.name for c in (a, b) if remaining(c.memory, c.clock(real), timing) > 0]
        if len(open_) > 1:
            raise AssertionError(f"both may write at t={real}")
        leaders_seen.update(open_)
    return leaders_seen, cut_for


@pytest.mark.parametrize("seed", range(40))
def test_two_candidates_never_both_may_write(seed: int) -> None:
    leaders_seen, cut_for = _simulate(seed, T)
    assert leaders_seen  # someone led
    if cut_for > T.lease_duration + 3:
        assert leaders_seen == {"a", "b"}  # the cut-off handed over


def test_the_simulation_sees_overlap_when_the_lease_is_shorter_than_the_deadline() -> None:
    """Positive control of the invariant above: a lease shorter than the renew deadline lets
    a standby in while the cut-off holder still believes it leads."""
    short = Timing(lease_duration=5, renew_deadline=10, retry_period=2)
    failures = 0
    for seed in range(40):
        try:
            _simulate(seed, short)
        except AssertionError:
            failures += 1
    assert failures > 0


def test_the_lease_namespace_is_the_setting_then_pod_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "from-pod")
    assert lease_namespace(OperatorSettings(lease_namespace="ops")) == "ops"
    assert lease_namespace(OperatorSettings()) == "from-pod"


def _put_count(api: client.ApiClient, port: int, accepted: list[int]) -> int:
    """PUTs once through `api` to a server that hangs up on every connection; how many
    connections the request made."""
    before = len(accepted)
    with pytest.raises(urllib3.exceptions.HTTPError):
        api.call_api("PUT", f"http://127.0.0.1:{port}/x", header_params={}, body="{}")
    time.sleep(0.2)  # the server thread counts the last connection
    return len(accepted) - before


@pytest.fixture
def hang_up() -> Iterator[tuple[int, list[int]]]:
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(1)
            conn.recv(65536)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


def test_the_writers_client_never_sends_a_request_twice(
    hang_up: tuple[int, list[int]],
) -> None:
    """urllib3 re-sends a failed request by itself (3 retries): such a copy would never pass
    the fence. The elector turns that off on the client it fences."""
    port, accepted = hang_up
    plain = client.ApiClient(client.Configuration())
    assert _put_count(plain, port, accepted) == 4  # control: urllib3's default retries
    fenced = client.ApiClient(client.Configuration())
    LeaderElector(fenced, OperatorSettings(), identity="a")
    assert _put_count(fenced, port, accepted) == 1
