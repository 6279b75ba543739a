"""The holder's configuration, parsed once (pure: no I/O but the caller's text).

The operator writes one JSON document per namespace into a ConfigMap that the holder's pod
mounts; it lists the services held for:

    {"services": {"<svc>": {"port": 18001,
                            "backend": "http://<svc>-ready.<ns>.svc.cluster.local:8000",
                            "queue": 1000, "holdTimeoutSeconds": 900, "retryAfterSeconds": 5}}}

One listening port per service: the operator's EndpointSlice of Service <svc> points at the
holder pod's IP and that port, so the port says which service a request is for. `vllmService`
(optional) names the VLLMService to wake when it is not the service's own name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

# a Kubernetes object name that is also a DNS label (a Service's name is one)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_KEYS = {"port", "backend", "queue", "holdTimeoutSeconds", "retryAfterSeconds", "vllmService"}

DEFAULT_QUEUE = 1000
DEFAULT_HOLD_TIMEOUT_SECONDS = 900.0
DEFAULT_RETRY_AFTER_SECONDS = 5


class ConfigError(ValueError):
    """The document is not a valid holder configuration; the message names the field."""


@dataclass(frozen=True)
class ServiceConfig:
    name: str
    port: int
    backend: str  # base URL, no trailing slash: `{backend}/health`, `{backend}{path}`
    queue: int  # held requests at most; beyond it 429
    hold_timeout_seconds: float
    retry_after_seconds: int
    vllm_service: str  # the VLLMService the wake annotation goes on


@dataclass(frozen=True)
class HolderConfig:
    services: Mapping[str, ServiceConfig]

    def by_port(self) -> dict[int, ServiceConfig]:
        return {s.port: s for s in self.services.values()}


EMPTY = HolderConfig(services=MappingProxyType({}))


def parse_config(text: str, *, reserved_ports: frozenset[int] = frozenset()) -> HolderConfig:
    """The document as a HolderConfig; ConfigError names the first field that is wrong.
    `reserved_ports`: ports the holder itself uses (its admin port), refused for a service."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"not JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("services", {}), dict):
        raise ConfigError('expected {"services": {"<name>": {...}}}')
    services: dict[str, ServiceConfig] = {}
    ports: dict[int, str] = {}
    for name, body in doc.get("services", {}).items():
        svc = _service(name, body)
        if svc.port in reserved_ports:
            raise ConfigError(f"services.{name}.port: {svc.port} is the holder's own port")
        if svc.port in ports:
            raise ConfigError(f"services.{name}.port: {svc.port} is also {ports[svc.port]}'s")
        ports[svc.port] = name
        services[name] = svc
    return HolderConfig(services=MappingProxyType(services))


def _service(name: Any, body: Any) -> ServiceConfig:
    where = f"services.{name}"
    if not isinstance(name, str) or not _DNS_LABEL.match(name):
        raise ConfigError(f"{where}: a service name is a DNS label (lower case, digits, -)")
    if not isinstance(body, dict):
        raise ConfigError(f"{where}: expected an object")
    unknown = set(body) - _KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    port = _int(body, "port", where, low=1, high=65535)
    backend = body.get("backend")
    if not isinstance(backend, str):
        raise ConfigError(f"{where}.backend: required, a URL such as http://<svc>-ready:8000")
    url = urlsplit(backend)
    if url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment:
        raise ConfigError(f"{where}.backend: {backend!r} is not an http(s) base URL")
    queue = _int(body, "queue", where, low=0, default=DEFAULT_QUEUE)
    hold = body.get("holdTimeoutSeconds", DEFAULT_HOLD_TIMEOUT_SECONDS)
    if isinstance(hold, bool) or not isinstance(hold, int | float) or hold <= 0:
        raise ConfigError(f"{where}.holdTimeoutSeconds: a positive number of seconds")
    retry_after = _int(body, "retryAfterSeconds", where, low=0, default=DEFAULT_RETRY_AFTER_SECONDS)
    vllm_service = body.get("vllmService", name)
    if not isinstance(vllm_service, str) or not _DNS_LABEL.match(vllm_service):
        raise ConfigError(f"{where}.vllmService: a VLLMService name")
    return ServiceConfig(
        name=name,
        port=port,
        backend=backend.rstrip("/"),
        queue=queue,
        hold_timeout_seconds=float(hold),
        retry_after_seconds=retry_after,
        vllm_service=vllm_service,
    )


def _int(
    body: dict[str, Any],
    key: str,
    where: str,
    *,
    low: int,
    high: int | None = None,
    default: int | None = None,
) -> int:
    value = body.get(key, default)
    if value is None:
        raise ConfigError(f"{where}.{key}: required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}.{key}: an integer, not {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise ConfigError(f"{where}.{key}: {value} is outside {bound}")
    return value
