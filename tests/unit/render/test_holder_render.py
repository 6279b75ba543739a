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
    pod_holds,
    queue_share,
    render_holder,
    render_holder_slice,
    render_ready_service,
    with_zero,
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
    assert kinds == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
    ]
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
    # each of the two pods holds half of hold.queue (1000 by default)
    assert (entry["queue"], entry["holdTimeoutSeconds"], entry["retryAfterSeconds"]) == (
        500,
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


def test_two_pods_on_different_nodes_where_they_can_and_one_disrupted_at_a_time() -> None:
    one = render_holder("ns", [svc("a", ZERO)], SETTINGS)
    deployment, pdb = one[4], one[5]
    assert deployment["spec"]["replicas"] == 2
    strategy = deployment["spec"]["strategy"]["rollingUpdate"]
    assert (strategy["maxSurge"], strategy["maxUnavailable"]) == (1, 0)
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    # preferred, not required: a one-node cluster still runs both
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert pdb["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": HOLDER}},
    }
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--accept-seconds=20" in args
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > 600 + 20  # the accept window and the drain both fit


def test_the_queue_is_split_between_the_pods_rounded_up() -> None:
    assert [queue_share(q) for q in (1, 2, 20, 21, 1000)] == [1, 1, 10, 11, 500]
    one = render_holder(
        "ns",
        [svc("a", {**ZERO, "autoscaling": {**ZERO["autoscaling"], "hold": {"queue": 21}}})],
        SETTINGS,
    )
    assert json.loads(one[3]["data"]["config.json"])["services"]["a"]["queue"] == 11


def test_the_pod_template_says_which_services_it_holds_at_which_port() -> None:
    a, b = svc("a", ZERO), svc("b", ZERO)
    ports = holder_ports([a, b])
    template = render_holder("ns", [a, b], SETTINGS)[4]["spec"]["template"]
    assert pod_holds(template) == ports
    # a service added: the template changes (the pods roll), the others keep their port
    more = render_holder("ns", [a, b, svc("c", ZERO)], SETTINGS)[4]["spec"]["template"]
    assert more != template
    assert {k: pod_holds(more)[k] for k in ("a", "b")} == ports
    # not a holder pod, or a value that is not a map of ports: holds nothing
    assert pod_holds({"metadata": {}}) == {}
    bad = {"metadata": {"annotations": {"serving.vllm-operator.dev/holds-for": "[1]"}}}
    assert pod_holds(bad) == {}
    odd = {"metadata": {"annotations": {"serving.vllm-operator.dev/holds-for": '{"a": "x"}'}}}
    assert pod_holds(odd) == {}


def test_the_slice_lists_at_most_three_holder_pods() -> None:
    a = svc("a", ZERO)
    pods = [(f"vllm-holder-{i}", f"u{i}", f"10.0.0.{i}") for i in range(5)]
    out = with_zero(
        [], a, SETTINGS, replicas=0, holder_in_path=True, services=[a], holder_pods=pods
    )
    (slice_,) = [m for m in out if m["kind"] == "EndpointSlice"]
    assert [e["targetRef"]["name"] for e in slice_["endpoints"]] == [
        "vllm-holder-0",
        "vllm-holder-1",
        "vllm-holder-2",
    ]
