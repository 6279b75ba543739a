"""The rendered PrometheusRule and PodMonitor are accepted, field for field, by an API server
that has the Prometheus Operator's CRDs (v0.85.0, vendored in tests/data): strict field
validation rejects a misspelt field instead of pruning it, and the object read back carries
exactly the rendered spec. The CRDs are removed again at the end, so the other tests see a
cluster without the Prometheus Operator (where the operator must not render these objects).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import get, wait_for
from tests.unit.builders import service
from vllm_localenv.cluster import LocalCluster
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.render.monitoring import MONITORING_CRDS, render_monitoring

pytestmark = pytest.mark.cluster

CRD_DIR = Path(__file__).resolve().parents[1] / "data" / "prometheus-operator-crds"


@pytest.fixture
def monitoring_crds(cluster: LocalCluster) -> Iterator[None]:
    files = sorted(CRD_DIR.glob("*.yaml"))
    assert len(files) == len(MONITORING_CRDS)
    for f in files:
        cluster.kubectl("apply", "--server-side", "-f", str(f))
    for crd in MONITORING_CRDS.values():
        cluster.wait_crds_established(crd)
    yield
    for f in files:
        cluster.kubectl("delete", "-f", str(f), "--ignore-not-found", "--wait=true")


def test_rendered_monitoring_objects_match_the_prometheus_operator_schema(
    cluster: LocalCluster, namespace: str, monitoring_crds: None
) -> None:
    svc = service("tinyllama", {"monitoring": {"alerts": {"kvCacheUsage": 0.8}}}).model_copy(
        update={"namespace": namespace}
    )
    settings = OperatorSettings(monitoring_labels={"release": "prometheus"})
    rendered = render_monitoring(svc, settings)
    assert [m["kind"] for m in rendered] == ["PrometheusRule", "PodMonitor"]
    for manifest in rendered:
        manifest["metadata"].pop("ownerReferences")  # no VLLMService object behind it here
        cluster.kubectl(
            "apply",
            "--server-side",
            "--validate=strict",
            "--field-manager=vllm-operator",
            "-f",
            "-",
            stdin=json.dumps(manifest),
        )
        live = wait_for(
            f"the {manifest['kind']}",
            lambda m=manifest: get(cluster, namespace, m["kind"].lower(), m["metadata"]["name"]),
        )
        assert live["spec"] == manifest["spec"], manifest["kind"]
        assert live["metadata"]["labels"]["release"] == "prometheus"
