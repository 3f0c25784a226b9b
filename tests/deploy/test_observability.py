"""deploy/observability: the rules pass Prometheus's own checker and unit tests (each alert
fires on series that should fire it and not on those beside them), the PrometheusRule
carries the same rules, the dashboard JSON is what its generator writes and has one row
per operator question, and every alert and panel is explained in docs/observability.md.
promtool is Debian's (scripts/install-tools.sh installs the prometheus package)."""

from __future__ import annotations

import json
import re
import runpy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
OBS = ROOT / "deploy" / "observability"
DOC = ROOT / "docs" / "observability.md"
MISSING = "promtool not found: run scripts/install-tools.sh (installs Debian's prometheus package)"


def promtool(*args: str, cwd: Path = OBS) -> subprocess.CompletedProcess:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip(MISSING)
    return subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def _rules() -> dict:
    return yaml.safe_load((OBS / "rules.yml").read_text())


def _alerts() -> list[str]:
    return [r["alert"] for g in _rules()["groups"] for r in g["rules"] if "alert" in r]


def test_the_rules_pass_promtool_check():
    out = promtool("check", "rules", "rules.yml")
    assert out.returncode == 0, out.stdout + out.stderr


def test_each_alert_fires_and_holds_as_its_unit_tests_say():
    out = promtool("test", "rules", "tests/rules.test.yml")
    assert out.returncode == 0, out.stdout + out.stderr
    tested = set(re.findall(r"alertname: (\w+)", (OBS / "tests" / "rules.test.yml").read_text()))
    assert tested == set(_alerts()), "every alert needs its promtool test"


@pytest.mark.parametrize("change", [
    ("instance:orpheus_slots_used:ratio > 0.9", "instance:orpheus_slots_used:ratio > 0.95"),
    ("p95_5m > 0.5", "p95_5m > 1.0"),
    ('up{job="orpheus-svc"} == 0', 'up == 0'),  # fires for someone else's target too
])
def test_the_unit_tests_fail_when_a_rule_changes(tmp_path, change):
    (tmp_path / "tests").mkdir()
    shutil.copy(OBS / "tests" / "rules.test.yml", tmp_path / "tests")
    text = (OBS / "rules.yml").read_text()
    assert change[0] in text
    (tmp_path / "rules.yml").write_text(text.replace(change[0], change[1]))
    out = promtool("test", "rules", "tests/rules.test.yml", cwd=tmp_path)
    assert out.returncode != 0, out.stdout


def test_the_prometheusrule_carries_the_rules_file():
    rule = yaml.safe_load((OBS / "prometheusrule.yaml").read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["spec"]["groups"] == _rules()["groups"]


def test_the_dashboard_is_what_its_generator_writes():
    generator = runpy.run_path(str(OBS / "dashboard.py"))  # not as __main__: writes nothing
    assert generator["render"]() == (OBS / "dashboard.json").read_text(), \
        "dashboard.json is stale: run python3 deploy/observability/dashboard.py"


def _dashboard() -> dict:
    return json.loads((OBS / "dashboard.json").read_text())


def test_the_dashboard_has_a_datasource_variable_and_one_row_per_question():
    d = _dashboard()
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["datasource", "job", "instance"]
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]
    assert len(rows) == 3 and rows[0].startswith("Why was") and "keeping up" in rows[1] \
        and rows[2].startswith("Wake me")
    graphs = [p for p in d["panels"] if p.get("targets")]
    for p in graphs:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
    exprs = [t["expr"] for p in graphs for t in p["targets"]]
    assert any('instance=~"$instance"' in e and "by (instance" in e for e in exprs)  # per replica
    assert any(e.startswith("sum(") for e in exprs)  # fleet


def test_every_alert_and_panel_is_explained_in_the_docs():
    doc = DOC.read_text()
    for alert in _alerts():
        assert f"### {alert}" in doc, f"docs/observability.md has no section for {alert}"
    for p in _dashboard()["panels"]:
        if p["type"] != "row":
            assert p["title"] in doc, f"docs/observability.md does not explain {p['title']!r}"
