"""The securityContext of the pods the operator renders, per settings.vllm_pod_security (what
Pod Security admission then judges: tests/integration/test_pod_security.py)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import setup_missing
from tests.unit.builders import service
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.render.benchmark import render_job
from vllm_operator.render.deployment import HOME_ENV, NON_ROOT_ID, render_deployment

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


def test_restricted_names_a_user_and_puts_the_compiler_caches_in_the_home_volume() -> None:
    """uid 65532 has no passwd entry in the upstream vLLM images (issue 19 (1)): the pod names
    its user in the environment, and the inductor and Triton caches lie in the writable home
    volume whatever HOME is."""
    (c,) = pod("minimal", RESTRICTED)["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["USER"] == env["LOGNAME"] == "vllm"
    (home,) = [m["mountPath"] for m in c["volumeMounts"] if m["name"] == "home"]
    assert env["HOME"] == home
    for cache in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        assert env[cache].startswith(f"{home}/"), cache


@pytest.mark.parametrize("name", [name for name, _ in HOME_ENV])
def test_a_users_value_wins(name: str) -> None:
    """Each of the home's variables is one spec.env may set: the renderer then leaves its own
    out (two entries of one name are refused by server-side apply)."""
    p = pod("minimal", RESTRICTED, {"env": [{"name": name, "value": "/data/mine"}]})
    (c,) = p["containers"]
    assert [e for e in c["env"] if e["name"] == name] == [{"name": name, "value": "/data/mine"}]
    others = {n for n, _ in HOME_ENV} - {name}
    assert others <= {e["name"] for e in c["env"]}


GETUSER = (
    "import getpass, json, pathlib; "
    "print(json.dumps([getpass.getuser(), str(pathlib.Path.home())]))"
)


def _runnable_by_anyone(path: Path) -> bool:
    """path is executable by others, and every directory above it searchable by them."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


def _run_as_pod_user(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        setup_missing("setpriv is missing: scripts/install-node-deps.sh installs util-linux")
    if os.geteuid() != 0:
        setup_missing("running a command as uid 65532 needs root")
    candidates = [Path(os.path.realpath(sys.executable)), Path("/usr/bin/python3")]
    python = next((p for p in candidates if p.exists() and _runnable_by_anyone(p)), None)
    if python is None:
        setup_missing(f"no Python that uid {NON_ROOT_ID} may run among {candidates}")
    ids = str(NON_ROOT_ID)
    return subprocess.run(
        [setpriv, "--reuid", ids, "--regid", ids, "--clear-groups", str(python), "-c", GETUSER],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_getuser_answers_as_the_pods_uid_with_the_rendered_env() -> None:
    """What torch before 2.13 calls at vLLM's start-up, run as uid 65532 with exactly the
    container's rendered environment (its literal values): the pod's user name, not
    KeyError('getpwuid(): uid not found: 65532'). The same call with HOME alone (what the
    renderer set before) still fails here, so the host has no passwd entry that would hide it."""
    (c,) = pod("minimal", RESTRICTED)["containers"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert "PATH" not in env  # nothing of this process's environment leaks in
    proc = _run_as_pod_user(env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["vllm", env["HOME"]]
    try:
        pwd.getpwuid(NON_ROOT_ID)
    except KeyError:
        before = _run_as_pod_user({"HOME": env["HOME"]})
        assert before.returncode != 0
        assert f"uid not found: {NON_ROOT_ID}" in before.stderr


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
