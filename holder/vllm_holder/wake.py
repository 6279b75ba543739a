"""The wake action: asks the operator for one replica of a VLLMService.

A JSON merge patch of the VLLMService that sets the annotation
`serving.vllm-operator.dev/wake-requested-at` to the time of the ask (RFC 3339, UTC): the
operator watches VLLMServices, so the patch is an event it reconciles at once, and the
annotation is also durable (an operator that was down sees it when it starts). The call is
made from inside the pod with its service account's token and CA; the Role the operator gives
that service account allows `patch` on vllmservices of its namespace and nothing else.

A plain aiohttp request, not the Kubernetes client: the one call the holder makes does not
justify the client's size in a small image. The token file is read at every call (projected
service account tokens rotate).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

# the operator's API (vllm_operator/__init__.py: GROUP, VERSION, PLURAL): repeated here because
# the holder's image holds nothing of the operator; tests/unit/holder checks that they agree
GROUP = "serving.vllm-operator.dev"
VERSION = "v1alpha1"
PLURAL = "vllmservices"
WAKE_ANNOTATION = f"{GROUP}/wake-requested-at"

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
log = logging.getLogger("vllm_holder.wake")


class WakeError(Exception):
    """The API server did not take the patch; the message says what it answered."""


@dataclass(frozen=True)
class ApiAccess:
    """Where the API server is and how to authenticate to it."""

    base_url: str  # https://host:port (or http:// for a test server)
    namespace: str
    token_file: Path | None
    ca_file: Path | None

    @classmethod
    def in_cluster(
        cls,
        *,
        base_url: str | None = None,
        namespace: str | None = None,
        token_file: Path | None = None,
        ca_file: Path | None = None,
    ) -> ApiAccess:
        """The pod's own service account, each part overridable."""
        if base_url is None:
            host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            host = f"[{host}]" if ":" in host else host  # an IPv6 cluster
            base_url = f"https://{host}:{port}" if host else ""
        if namespace is None:
            ns_file = SERVICE_ACCOUNT / "namespace"
            namespace = (
                ns_file.read_text().strip()
                if ns_file.is_file()
                else os.environ.get("POD_NAMESPACE", "")
            )
        return cls(
            base_url=base_url.rstrip("/"),
            namespace=namespace,
            token_file=token_file if token_file is not None else SERVICE_ACCOUNT / "token",
            ca_file=ca_file if ca_file is not None else SERVICE_ACCOUNT / "ca.crt",
        )


def wake_patch(now: dt.datetime) -> dict[str, Any]:
    """The merge patch: the wake annotation set to `now` (RFC 3339, UTC, seconds)."""
    stamp = now.astimezone(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return {"metadata": {"annotations": {WAKE_ANNOTATION: stamp}}}


class KubeWaker:
    """Patches the wake annotation onto a VLLMService of the holder's namespace."""

    def __init__(self, access: ApiAccess, *, timeout_seconds: float = 10.0) -> None:
        self.access = access
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None

    def url(self, vllm_service: str) -> str:
        a = self.access
        return (
            f"{a.base_url}/apis/{GROUP}/{VERSION}/namespaces/{a.namespace}/{PLURAL}/{vllm_service}"
        )

    async def wake(self, vllm_service: str) -> None:
        """One PATCH; WakeError when the API server refuses it or cannot be reached."""
        if not self.access.base_url or not self.access.namespace:
            raise WakeError(
                "no API server or namespace (not in a pod: pass --api-server and --namespace)"
            )
        headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        body = json.dumps(wake_patch(dt.datetime.now(dt.UTC)))
        try:
            async with self._client().patch(
                self.url(vllm_service), data=body, headers=headers, ssl=self._ssl()
            ) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:300]
                    raise WakeError(f"PATCH {vllm_service}: HTTP {resp.status}: {text}")
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise WakeError(f"PATCH {vllm_service}: {type(e).__name__}: {e}") from e

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    def _token(self) -> str:
        f = self.access.token_file
        return f.read_text().strip() if f is not None and f.is_file() else ""

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self.access.base_url.startswith("https://"):
            return True  # (ignored by aiohttp for http://)
        ca = self.access.ca_file
        if ca is not None and ca.is_file():
            return ssl.create_default_context(cafile=str(ca))
        return True  # the system's trust store
