"""The Helm chart's test helpers: the pinned helm binary (scripts/build-helm.sh) and its
helm-unittest plugin, `helm template` as parsed objects, and the Argo CD Lua health check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support import setup_missing
from vllm_localenv.cluster import REPO_ROOT

CHART = REPO_ROOT / "charts" / "vllm-operator"
HEALTH_LUA = REPO_ROOT / "deploy" / "argocd" / "health.lua"
CACHE = Path(
    os.environ.get("VLLM_OPERATOR_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm-operator"
)
HELM = CACHE / "bin" / "helm"
HELM_PLUGINS = CACHE / "helm-plugins"


def need_helm() -> None:
    if not HELM.exists():
        setup_missing("helm is not built: make helm (scripts/build-helm.sh)")


def helm(
    *args: str, kubeconfig: Path | None = None, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Runs the pinned helm with its own config/cache dirs (never the user's repositories)."""
    need_helm()
    home = CACHE / "helm-home"
    env = {
        **os.environ,
        "HELM_PLUGINS": str(HELM_PLUGINS),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    res = subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if check and res.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({res.returncode}):\n{res.stderr}")
    return res


def set_args(values: dict[str, Any] | None) -> list[str]:
    """Values as one --set-json per top-level key (exact types, no string coercion)."""
    return [a for k, v in (values or {}).items() for a in ("--set-json", f"{k}={json.dumps(v)}")]


def template(
    values: dict[str, Any] | None = None,
    *,
    release: str = "vllm-operator",
    namespace: str = "vllm-operator-system",
    chart: Path = CHART,
) -> list[dict[str, Any]]:
    out = helm("template", release, str(chart), "-n", namespace, *set_args(values)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    for d in docs:
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name):
            return d
    raise AssertionError(
        f"no {kind} {name or ''} in {[(d['kind'], d['metadata']['name']) for d in docs]}"
    )


def lua_literal(value: Any) -> str:
    """A JSON value as a Lua 5.1 table constructor (what Argo CD hands the script as `obj`)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = "".join(
            c if c.isprintable() and c not in '"\\' else f"\\{ord(c):03d}" for c in value
        )
        return f'"{escaped}"'
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"[{lua_literal(k)}] = {lua_literal(v)}" for k, v in value.items())
            + "}"
        )
    raise TypeError(type(value))


def argocd_health(obj: dict[str, Any]) -> tuple[str, str]:
    """(status, message) of deploy/argocd/health.lua under Debian's lua5.1 for one object."""
    lua = shutil.which("lua5.1")
    if lua is None:
        setup_missing("lua5.1 is not installed (scripts/install-node-deps.sh)")
    driver = (
        f"obj = {lua_literal(obj)}\n"
        f"local hs = dofile({lua_literal(str(HEALTH_LUA))})\n"
        'io.write(hs.status, "\\n", hs.message or "")\n'
    )
    res = subprocess.run([lua, "-"], input=driver, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise AssertionError(f"health.lua failed: {res.stderr}")
    status, _, message = res.stdout.partition("\n")
    return status, message


def kstatus(obj: dict[str, Any]) -> str:
    """kstatus's generic rules (sigs.k8s.io/cli-utils/pkg/kstatus/status, used by Flux and
    `kubectl wait`-style tools) for a custom resource, in Python: Terminating while deleted;
    InProgress until status.observedGeneration reaches metadata.generation or while
    Reconciling=True; Failed while Stalled=True; otherwise Current."""
    meta = obj.get("metadata", {})
    if meta.get("deletionTimestamp"):
        return "Terminating"
    status = obj.get("status") or {}
    generation = meta.get("generation")
    observed = status.get("observedGeneration")
    if generation is not None and observed is not None and observed != generation:
        return "InProgress"
    conditions = {c.get("type"): c for c in status.get("conditions", [])}
    if conditions.get("Reconciling", {}).get("status") == "True":
        return "InProgress"
    if conditions.get("Stalled", {}).get("status") == "True":
        return "Failed"
    return "Current"
