"""The alerts a user reads about are the alerts Prometheus has (issue 22): the CRD's field
descriptions (kubectl explain), docs/monitoring.md and the runbooks name exactly the alerts of the
rules, each threshold's description names the alert that threshold sets, with its `for`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.builders import service
from vllm_operator.api.alertnames import AlertName
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import AlertThresholds
from vllm_operator.generate.monitoring import render_files
from vllm_operator.render.monitoring import (
    Scope,
    operator_alerts,
    render_prometheus_rule,
    vllm_alerts,
)

ROOT = Path(__file__).resolve().parents[3]
# words that start like an alert name but are the API's kinds, or the node's VLLMOP-* chains
NOT_ALERTS = {"VLLMService", "VLLMServices", "VLLMServiceList", "VLLMServiceSpec"}
NOT_ALERTS |= {"VLLMServiceStatus"}
WORD = re.compile(r"\bVLLM[A-Z][A-Za-z0-9]*\b")


def mentioned(text: str) -> set[str]:
    """The alert names a text mentions: VLLM... words with a lower-case letter, not a kind."""
    return {w for w in WORD.findall(text) if w not in NOT_ALERTS and w != w.upper()}


def descriptions(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        own = [schema["description"]] if isinstance(schema.get("description"), str) else []
        return own + [d for v in schema.values() for d in descriptions(v)]
    if isinstance(schema, list):
        return [d for v in schema for d in descriptions(v)]
    return []


def rule_alerts(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


SHIPPED = rule_alerts(yaml.safe_load(render_files()["vllm-alerts.rules.yaml"])["groups"])
CRD = yaml.safe_load((ROOT / "crds" / "vllmservices.yaml").read_text())
(VERSION,) = CRD["spec"]["versions"]
THRESHOLDS_SCHEMA = VERSION["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
    "monitoring"
]["properties"]["alerts"]["properties"]


def test_the_rendered_rule_and_the_shipped_file_have_the_same_alerts() -> None:
    rule = render_prometheus_rule(service("tinyllama"), OperatorSettings())
    assert rule is not None
    rendered = rule_alerts(rule["spec"]["groups"])
    assert set(rendered) == set(SHIPPED)
    assert {a: r["for"] for a, r in rendered.items()} == {a: r["for"] for a, r in SHIPPED.items()}
    assert len(SHIPPED) == 9


def test_the_crd_names_only_alerts_that_exist_and_every_thresholded_one() -> None:
    named = set().union(*(mentioned(d) for d in descriptions(CRD)))
    assert named - set(SHIPPED) == set(), "the CRD names alerts the rules do not have"
    thresholded = {a.name for a in vllm_alerts(Scope(), AlertThresholds())}
    assert thresholded - named == set(), "alerts with a threshold the CRD does not name"


@pytest.mark.parametrize("field", list(AlertThresholds.model_fields))
def test_each_threshold_names_the_alert_it_sets_and_its_for(field: str) -> None:
    key = AlertThresholds.model_fields[field].alias or field
    default = getattr(AlertThresholds(), field)
    moved = AlertThresholds.model_validate({key: default / 2 or 0.5})
    changed = [
        a
        for a, b in zip(
            vllm_alerts(Scope(), AlertThresholds()), vllm_alerts(Scope(), moved), strict=True
        )
        if a.threshold != b.threshold
    ]
    assert len(changed) == 1, f"{field} sets {[a.name for a in changed]}"
    (alert,) = changed
    text = THRESHOLDS_SCHEMA[key]["description"]
    assert mentioned(text) == {alert.name}, text
    assert text.startswith(f"{alert.name}: ")
    assert f" {alert.id.held}" in text, (text, alert.for_)


@pytest.mark.parametrize("doc", ["docs/monitoring.md", "docs/runbooks.md"])
def test_the_docs_name_exactly_the_alerts_of_the_rules(doc: str) -> None:
    text = (ROOT / doc).read_text()
    named = mentioned(text)
    assert named - set(SHIPPED) == set(), f"{doc} names alerts the rules do not have"
    assert set(SHIPPED) - named == set(), f"{doc} leaves out alerts of the rules"


def test_every_alert_has_its_runbook_section_and_its_readme_row() -> None:
    runbooks = (ROOT / "docs" / "runbooks.md").read_text()
    headings = set(re.findall(r"^## (\S+)$", runbooks, flags=re.MULTILINE))
    # the runbook_url anchor is the name in lower case: GitHub's anchor of the heading
    assert set(SHIPPED) <= headings
    rows = {
        cells[0]: cells
        for line in (ROOT / "docs" / "monitoring.md").read_text().splitlines()
        if line.startswith("| VLLM")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    alerts = vllm_alerts(Scope(), AlertThresholds()) + operator_alerts(Scope())
    for alert in alerts:
        assert alert.name in rows, f"docs/monitoring.md's alert table has no row for {alert.name}"
        assert rows[alert.name][2] == alert.for_, (alert.name, rows[alert.name])
    assert {a.name for a in alerts} == set(SHIPPED)


def test_for_in_words() -> None:
    held = {f: AlertName("VLLMExample", f).held for f in ("0s", "1m", "5m", "30s", "2h")}
    assert held == {
        "0s": "at once",
        "1m": "for 1 minute",
        "5m": "for 5 minutes",
        "30s": "for 30 seconds",
        "2h": "for 2 hours",
    }
