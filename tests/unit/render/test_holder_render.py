"""The namespace's holder objects (render/holder.py): the same from every service's reconcile,
owned by every zero-able service, the config the holder reads, ports stable."""

from __future__ import annotations

import json

from tests.unit.builders import body
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.render.holder import (
    HOLDER,
    holder_ports,
    render_holder,
    render_holder_slice,
    render_ready_service,
)

SETTINGS = OperatorSettings()
ZERO = {"autoscaling": {"enabled": True, "minReplicas": 0}}


def svc(name: str, spec: dict | None = None, namespace: str = "ns") -> Service:
    b = body(spec=spec)
    b["metadata"].update(name=name, uid=f"uid-{name}", namespace=namespace)
    return Service.from_body(b)


def test_nothing_while_no_service_may_go_to_zero() -> None:
    assert (
        render_holder("ns", [svc("a"), svc("b", {"autoscaling": {"enabled": True}})], SETTINGS)
        == []
    )


def test_every_reconcile_renders_the_same_objects_owned_by_every_zero_able_service() -> None:
    a, b, other = svc("a", ZERO), svc("b", ZERO), svc("c")
    elsewhere = svc("d", ZERO, namespace="other")
    one = render_holder("ns", [a, b, other, elsewhere], SETTINGS)
    two = render_holder("ns", [elsewhere, other, b, a], SETTINGS)
    assert one == two
    kinds = [m["kind"] for m in one]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment"]
    for m in one:
        assert m["metadata"]["name"] == HOLDER
        owners = m["metadata"]["ownerReferences"]
        assert [o["name"] for o in owners] == ["a", "b"]
        assert not any(o["controller"] for o in owners)
        assert "serving.vllm-operator.dev/service" not in m["metadata"]["labels"]
    config = json.loads(one[3]["data"]["config.json"])
    assert sorted(config["services"]) == ["a", "b"]
    entry = config["services"]["a"]
    assert entry["backend"] == "http://a-ready.ns.svc.cluster.local:8000"
    assert (entry["queue"], entry["holdTimeoutSeconds"], entry["retryAfterSeconds"]) == (
        1000,
        900,
        5,
    )
    role = one[1]
    assert role["rules"] == [
        {
            "apiGroups": ["serving.vllm-operator.dev"],
            "resources": ["vllmservices"],
            "resourceNames": ["a", "b"],
            "verbs": ["patch"],
        }
    ]
    pod = one[4]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > 600  # longer than the holder's drain
    ports = {p["containerPort"] for p in pod["containers"][0]["ports"]}
    assert {entry["port"], config["services"]["b"]["port"], 9090} == ports


def test_ports_are_stable_and_distinct() -> None:
    services = [svc(n, ZERO) for n in ("a", "b", "chat", "embed")]
    ports = holder_ports(services)
    assert len(set(ports.values())) == 4
    assert all(18000 <= p < 28000 for p in ports.values())
    # adding a service leaves the others' ports alone (no collision here)
    more = holder_ports([*services, svc("zeta", ZERO)])
    assert {k: more[k] for k in ports} == ports


def test_the_ready_service_and_the_holder_slice() -> None:
    a = svc("a", ZERO)
    ready = render_ready_service(a)
    assert ready["metadata"]["name"] == "a-ready"
    assert ready["spec"]["selector"] == {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": "a",
    }
    s = render_holder_slice(a, 18123, [("vllm-holder-x", "u1", "10.0.0.7")])
    assert s["metadata"]["labels"]["kubernetes.io/service-name"] == "a"
    assert s["ports"] == [{"name": "http", "port": 18123, "protocol": "TCP", "appProtocol": "http"}]
    assert s["endpoints"][0]["addresses"] == ["10.0.0.7"]
