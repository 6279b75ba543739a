"""Settings the operator no longer reads (kopf peering, standalone, the finalizer): a
deployment that still sets them starts, and its log says each one is ignored and why."""

from __future__ import annotations

import logging

import pytest

from vllm_operator.api.settings import RETIRED, OperatorSettings


def test_retired_settings_are_not_fields_any_more() -> None:
    fields = {name.upper() for name in OperatorSettings.model_fields}
    assert not fields & set(RETIRED)


def test_each_retired_setting_still_set_is_named_in_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("VLLM_OPERATOR_STANDALONE", "true")
    monkeypatch.setenv("VLLM_OPERATOR_PEERING_NAME", "vllm-operator")
    settings = OperatorSettings()  # starts: unknown variables of the prefix are not errors
    with caplog.at_level(logging.WARNING, logger="vllm_operator"):
        found = settings.warn_retired()
    assert sorted(found) == ["PEERING_NAME", "STANDALONE"]
    text = caplog.text
    assert "VLLM_OPERATOR_STANDALONE is no longer used" in text
    assert "VLLM_OPERATOR_PEERING_NAME is no longer used" in text


def test_nothing_is_said_when_none_is_set(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in RETIRED:
        monkeypatch.delenv(f"VLLM_OPERATOR_{name}", raising=False)
    with caplog.at_level(logging.WARNING, logger="vllm_operator"):
        assert OperatorSettings().warn_retired() == []
    assert caplog.text == ""
