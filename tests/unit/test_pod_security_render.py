"""The securityContext of the pods the operator renders, per settings.vllm_pod_security (what
Pod Security admission then judges: tests/integration/test_pod_security.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.builders import service
from vllm_operator.render.benchmark import render_job
from vllm_operator.render.deployment import render_deployment
from vllm_operator.settings import OperatorSettings

RESTRICTED = OperatorSettings()
BASELINE = OperatorSettings(vllm_pod_security="baseline")


def pod(sample: str, settings: OperatorSettings, spec: dict[str, Any] | None = None) -> Any:
    return render_deployment(service(sample, spec), settings)["spec"]["template"]["spec"]


@pytest.mark.parametrize("sample", ["minimal", "tiny-cpu", "llama3-8b"])
def test_restricted_is_the_default(sample: str) -> None:
    p = pod(sample, RESTRICTED)
    assert p["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "fsGroupChangePolicy": "OnRootMismatch",
    }
    (c,) = p["containers"]
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    # a writable HOME for any uid: an emptyDir over root's home, which also holds the default
    # HF cache mount (/root/.cache/huggingface)
    assert {"name": "home", "emptyDir": {}} in p["volumes"]
    assert {"name": "home", "mountPath": "/root"} in c["volumeMounts"]
    assert c["env"][0] == {"name": "HOME", "value": "/root"}
    # no API token in the vLLM pods (vLLM never calls the API)
    assert p["automountServiceAccountToken"] is False
    # /dev/shm stays (vLLM's shared memory between processes, NCCL on GPUs)
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]


def test_baseline_keeps_the_image_user_and_adds_nothing() -> None:
    p = pod("minimal", BASELINE)
    assert p["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    (c,) = p["containers"]
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert "home" not in {v["name"] for v in p["volumes"]}
    assert "HOME" not in {e["name"] for e in c["env"]}


def test_a_users_home_wins() -> None:
    p = pod("minimal", RESTRICTED, {"env": [{"name": "HOME", "value": "/data/home"}]})
    homes = [e for e in p["containers"][0]["env"] if e["name"] == "HOME"]
    assert homes == [{"name": "HOME", "value": "/data/home"}]


def test_the_setting_is_refused_unless_a_level() -> None:
    with pytest.raises(ValueError, match="vllm_pod_security"):
        OperatorSettings(vllm_pod_security="privileged")  # type: ignore[arg-type]


@pytest.mark.parametrize("settings", [RESTRICTED, BASELINE])
def test_the_benchmark_pod_is_restricted_either_way(settings: OperatorSettings) -> None:
    p = render_job(service("minimal"), settings, "0123456789abcdef")["spec"]["template"]["spec"]
    assert p["securityContext"]["runAsNonRoot"] is True
    assert p["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = p["containers"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
