"""The plain manifests of deploy/ rendered from the Helm chart, their one source (`make
generate`; `make check-generated` and tests/unit/localenv/test_deploygen.py fail when they drift).

`helm template vllm-operator charts/vllm-operator -n vllm-operator-system -f
charts/vllm-operator/plain-values.yaml`, split by template into the three files a user applies
with kubectl: deploy/rbac.yaml (the namespace, the ServiceAccount and its RBAC),
deploy/admission-policy.yaml and deploy/operator.yaml. Helm's text is kept as it renders it,
comments included; only a header per file is added, and the Namespace that `helm install
--create-namespace` would create. A template this table does not place fails the generation,
so a new chart object never goes missing from deploy/ unnoticed.

    python -m vllm_localenv.deploygen [deploy]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from vllm_localenv.cluster import DEFAULT_BIN_DIR, DEFAULT_CACHE, REPO_ROOT

CHART = REPO_ROOT / "charts" / "vllm-operator"
PLAIN_VALUES = CHART / "plain-values.yaml"
RELEASE = "vllm-operator"
NAMESPACE = "vllm-operator-system"
HELM = DEFAULT_BIN_DIR / "helm"
COMMAND = (
    f"helm template {RELEASE} charts/vllm-operator -n {NAMESPACE} \\\n"
    "#     -f charts/vllm-operator/plain-values.yaml"
)

NAMESPACE_DOC = f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"


@dataclass(frozen=True)
class PlainFile:
    """One file under deploy/: what it is (its header) and the chart's templates it holds."""

    about: str
    templates: tuple[str, ...]


FILES: dict[str, PlainFile] = {
    "rbac.yaml": PlainFile(
        about=(
            "The operator's permissions, cluster-wide: exactly the requests it makes\n"
            "(docs/permissions.md; the chart's rbac.watchNamespaces is the namespaced mode,\n"
            "Roles only). It never reads Secrets: the Hugging Face token and API key are only\n"
            "referenced from the pod spec, and the kubelet resolves them.\n"
            "  kubectl apply --server-side -f deploy/rbac.yaml   (after crds/)"
        ),
        templates=("serviceaccount.yaml", "rbac.yaml", "leader-election.yaml"),
    ),
    "admission-policy.yaml": PlainFile(
        about=(
            "What RBAC cannot say (docs/permissions.md), held to the operator's own account\n"
            f"(system:serviceaccount:{NAMESPACE}:{RELEASE}, nobody else). Kubernetes 1.30+.\n"
            "  kubectl apply -f deploy/admission-policy.yaml"
        ),
        templates=("admission-policy.yaml",),
    ),
    "operator.yaml": PlainFile(
        about=(
            "The operator Deployment for a real cluster (after crds/ and deploy/rbac.yaml) and\n"
            "the Service of its own metrics. Two replicas are safe: leader election on a Lease\n"
            "lets one work at a time. deploy/local patches it for the local cluster's real node.\n"
            "  kubectl apply -f deploy/operator.yaml"
        ),
        templates=("deployment.yaml", "metrics.yaml"),
    ),
}

_SOURCE = re.compile(rf"^# Source: {re.escape(CHART.name)}/templates/(\S+)$", re.MULTILINE)


def helm_template() -> str:
    """The chart rendered with the plain values (the pinned helm of scripts/build-helm.sh)."""
    if not HELM.exists():
        raise SystemExit(f"{HELM} is missing: make helm (scripts/build-helm.sh)")
    home = DEFAULT_CACHE / "helm-home"
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    args = [str(HELM), "template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(PLAIN_VALUES)]
    return subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout


def split_by_template(rendered: str) -> dict[str, list[str]]:
    """Helm's documents grouped by the template that rendered them (`# Source:` lines)."""
    docs: dict[str, list[str]] = {}
    for doc in re.split(r"^---\s*$", rendered, flags=re.MULTILINE):
        m = _SOURCE.search(doc)
        if m is None:
            if doc.strip():
                raise ValueError(f"a document without its template: {doc[:200]!r}")
            continue
        lines = [line.rstrip() for line in doc.strip("\n").splitlines()]
        text = re.sub(r"\n{2,}", "\n", "\n".join(lines)).strip("\n") + "\n"
        docs.setdefault(m[1], []).append(text)
    return docs


def render(rendered: str | None = None) -> dict[str, str]:
    """{file name under deploy/: its text} from `helm template` of the chart."""
    by_template = split_by_template(helm_template() if rendered is None else rendered)
    placed = {t for f in FILES.values() for t in f.templates}
    unplaced = sorted(set(by_template) - placed)
    if unplaced:
        raise ValueError(f"rendered with the plain values but in no deploy/ file: {unplaced}")
    out: dict[str, str] = {}
    for name, plain in FILES.items():
        header = (
            "# Generated by `make generate` (python -m vllm_localenv.deploygen); do not edit.\n"
            f"# From the chart:\n#   {COMMAND}\n"
            + "".join(f"# {line}".rstrip() + "\n" for line in plain.about.splitlines())
        )
        docs = [NAMESPACE_DOC] if name == "rbac.yaml" else []
        docs += [d for t in plain.templates for d in by_template.get(t, [])]
        if not docs:
            raise ValueError(f"deploy/{name}: the chart rendered none of {plain.templates}")
        out[name] = header + "---\n".join(docs)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", nargs="?", type=Path, default=REPO_ROOT / "deploy")
    args = parser.parse_args(argv)
    for name, text in render().items():
        (args.out / name).write_text(text)


if __name__ == "__main__":
    main()
