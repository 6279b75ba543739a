"""The pure parts: the configuration document and the wake patch, and that the holder names
the operator's API exactly as the operator does (the holder's image holds nothing of it)."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

import vllm_operator
from vllm_holder import wake
from vllm_holder.config import ConfigError, ServiceConfig, parse_config


def doc(**services: object) -> str:
    return json.dumps({"services": services})


def test_a_service_with_defaults() -> None:
    config = parse_config(doc(chat={"port": 18001, "backend": "http://chat-ready.ns.svc:8000/"}))
    assert config.services["chat"] == ServiceConfig(
        name="chat",
        port=18001,
        backend="http://chat-ready.ns.svc:8000",
        queue=1000,
        hold_timeout_seconds=900.0,
        retry_after_seconds=5,
        vllm_service="chat",
    )
    assert config.by_port() == {18001: config.services["chat"]}
    assert parse_config("{}").services == {}


@pytest.mark.parametrize(
    ("services", "message"),
    [
        (
            {"a": {"port": 1, "backend": "http://a"}, "b": {"port": 1, "backend": "http://b"}},
            "also a's",
        ),
        ({"a": {"port": 9090, "backend": "http://a"}}, "holder's own port"),
        ({"a": {"port": 70000, "backend": "http://a"}}, "outside 1..65535"),
        ({"a": {"port": 1, "backend": "ftp://a"}}, "not an http(s) base URL"),
        ({"a": {"port": 1}}, "backend: required"),
        ({"a": {"port": 1, "backend": "http://a", "queue": -1}}, "queue: -1"),
        ({"a": {"port": 1, "backend": "http://a", "holdTimeoutSeconds": 0}}, "positive"),
        ({"a": {"port": 1, "backend": "http://a", "qeue": 5}}, "unknown keys ['qeue']"),
        ({"A_b": {"port": 1, "backend": "http://a"}}, "DNS label"),
        ({"a": {"port": True, "backend": "http://a"}}, "an integer"),
    ],
)
def test_invalid_documents_name_the_field(services: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(doc(**services), reserved_ports=frozenset({9090}))


def test_not_json_is_refused() -> None:
    with pytest.raises(ConfigError, match="not JSON"):
        parse_config("{services:")


def test_the_holder_names_the_operators_api() -> None:
    assert (wake.GROUP, wake.VERSION, wake.PLURAL) == (
        vllm_operator.GROUP,
        vllm_operator.VERSION,
        vllm_operator.PLURAL,
    )
    assert f"{vllm_operator.GROUP}/wake-requested-at" == wake.WAKE_ANNOTATION


def test_the_wake_patch_is_an_rfc3339_annotation() -> None:
    now = dt.datetime(2026, 12, 3, 10, 4, 5, 123456, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert wake.wake_patch(now) == {
        "metadata": {
            "annotations": {"serving.vllm-operator.dev/wake-requested-at": "2026-12-03T09:04:05Z"}
        }
    }


def test_in_cluster_access_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("POD_NAMESPACE", "team-a")
    access = wake.ApiAccess.in_cluster()
    assert access.base_url == "https://10.96.0.1:443"
    if not (wake.SERVICE_ACCOUNT / "namespace").is_file():
        assert access.namespace == "team-a"
    assert access.token_file == wake.SERVICE_ACCOUNT / "token"
    waker = wake.KubeWaker(access)
    assert waker.url("chat") == (
        f"https://10.96.0.1:443/apis/serving.vllm-operator.dev/v1alpha1/namespaces/"
        f"{access.namespace}/vllmservices/chat"
    )
