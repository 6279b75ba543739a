"""A PersistentVolumeClaim holding the tiny test model, bound to a local volume on the real
node: how the demo and the end-to-end tier hand a model to a VLLMService (spec.model.pvc), so
that the claim path is what runs. The files are copied under the cluster's state directory,
readable by the images' non-root users."""

from __future__ import annotations

import json
import shutil
from typing import Any

from vllm_localenv.cluster import LocalCluster
from vllm_localenv.node import NODE_NAME
from vllm_localenv.vllm_server import tiny_model

STORAGE_CLASS = "local-models"


def volume_name(namespace: str, claim: str) -> str:
    return f"{claim}-{namespace}"


def create(cluster: LocalCluster, namespace: str, claim: str = "tiny-model") -> None:
    """The PV (a `local` volume pinned to the real node) and the claim bound to it; idempotent."""
    dest = cluster.state_dir / "models" / f"{namespace}-{claim}"
    if not dest.exists():
        shutil.copytree(tiny_model(), dest)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    pv = volume_name(namespace, claim)
    items: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv, "labels": {"vllm-operator.dev/local-model": "tiny"}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": STORAGE_CLASS,
                "local": {"path": str(dest)},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [NODE_NAME],
                                    }
                                ]
                            }
                        ]
                    }
                },
                "claimRef": {"namespace": namespace, "name": claim},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": STORAGE_CLASS,
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]
    cluster.kubectl(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )


def delete(cluster: LocalCluster, namespace: str, claim: str = "tiny-model") -> None:
    cluster.kubectl("delete", "pv", volume_name(namespace, claim), "--wait=false", check=False)
    shutil.rmtree(cluster.state_dir / "models" / f"{namespace}-{claim}", ignore_errors=True)
