"""Version skew the versioning policy (docs/versioning.md) promises, on the real operator: the
CRD one version ahead of the operator (a chart upgrade applies the CRD first, and a rollback of
the operator image leaves it ahead) must not turn running services into InvalidSpec.

The newer CRD is today's CRD plus what a next release would add: a new optional field without
a default, and a new nested object with `default: {}` (what crdgen emits for every optional
nested object, so the API server fills it into every stored service on read).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.support import (
    WAIT_SECONDS,
    apply,
    audit,
    condition,
    deployment_reads,
    get,
    ready,
    sample,
    wait_for,
)
from vllm_localenv.cluster import REPO_ROOT, LocalCluster
from vllm_localenv.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster
CRD_FILE = REPO_ROOT / "crds" / "vllmservices.yaml"


@pytest.fixture
def restore_crd(cluster: LocalCluster) -> Iterator[None]:
    yield
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))


def newer_crd(field: str, prop: dict[str, Any]) -> str:
    newer = copy.deepcopy(yaml.safe_load(CRD_FILE.read_text()))
    newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        field
    ] = prop
    return json.dumps(newer)


def stays_ready(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str, name: str, since: float
) -> None:
    """Ready for the current generation through three whole drift-timer reconciles (5 s) after
    `since`, each seen in the API server's audit log (its read of the Deployment; the next
    read ends the one before): reconciles that ran, not a pause."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        svc = get(cluster, namespace, "vllmservice", name)
        assert condition(svc, "Ready").get("reason") != "InvalidSpec", condition(svc, "Ready")
        reads = deployment_reads(audit(cluster.audit_log, operator.username, namespace, since))
        if reads[name] > 3:
            break
        assert time.monotonic() < deadline, f"{reads[name]} reconciles of {name} since the CRD"
        time.sleep(1)
    assert ready(cluster, namespace, name)


def test_a_new_optional_field_in_the_crd_leaves_services_ready(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str, restore_crd: None
) -> None:
    apply(cluster, namespace, sample("minimal"))
    wait_for("minimal Ready", lambda: ready(cluster, namespace, "minimal"))
    manifest = newer_crd("futureKnob", {"type": "string", "description": "a next release's"})
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifest)
    stays_ready(operator, cluster, namespace, "minimal", time.time())


def test_a_new_defaulted_object_in_the_crd_leaves_services_ready(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str, restore_crd: None
) -> None:
    apply(cluster, namespace, sample("minimal"))
    wait_for("minimal Ready", lambda: ready(cluster, namespace, "minimal"))
    manifest = newer_crd(
        "futureBlock",
        {
            "type": "object",
            "default": {},
            "properties": {"mode": {"type": "string", "default": "Auto"}},
        },
    )
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifest)
    # the API server defaults on read, once its handler for the newer CRD is in place (a moment
    # after the apply: it is rebuilt asynchronously)
    svc = wait_for(
        "the API server to default futureBlock",
        lambda: (
            (s := get(cluster, namespace, "vllmservice", "minimal"))
            and "futureBlock" in s["spec"]
            and s
        ),
    )
    assert svc["spec"]["futureBlock"] == {"mode": "Auto"}
    stays_ready(operator, cluster, namespace, "minimal", time.time())
