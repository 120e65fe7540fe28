"""manifests/deploy/prometheus-rules.yaml: the alerts docs/operations.md recommends, as a file
Prometheus loads. ``promtool check rules`` accepts it, ``promtool test rules`` runs its unit test
(each alert fires on a sick series and not on a healthy twin), and it queries only metrics gflowd
serves."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parent.parent / "manifests" / "deploy"
RULES = DEPLOY / "prometheus-rules.yaml"
RULES_TEST = DEPLOY / "prometheus-rules.test.yaml"

_skip_without_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool is not installed (Debian: apt-get install prometheus)"
)


def needs_promtool(test):
    return pytest.mark.e2e(_skip_without_promtool(test))


def promtool(*argv: str, cwd: Path = DEPLOY) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *argv], cwd=cwd, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_promtool_check_rules_accepts_the_shipped_rules():
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout, result.stdout


@needs_promtool
def test_promtool_unit_test_of_every_alert_passes():
    result = promtool("test", "rules", str(RULES_TEST))
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_expects_it_to_fire_and_one_that_expects_silence():
    from controller.util.yamlio import load_one

    rules = load_one(RULES.read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tests = load_one(RULES_TEST.read_text())["tests"]
    fires = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c["exp_alerts"]}
    assert alerts == fires, alerts ^ fires
    for test in tests:  # silence: an explicit empty expectation, or a healthy twin instance
        quiet_case = any(not c["exp_alerts"] for c in test["alert_rule_test"])
        twin = any('instance="ok:9400"' in s["series"] for s in test["input_series"])
        assert quiet_case or twin, test["name"]


@needs_promtool
def test_the_unit_test_can_fail(tmp_path):
    """An alert whose threshold is wrong fails the unit test (the test above is not vacuous)."""
    (tmp_path / RULES.name).write_text(RULES.read_text().replace("> 120", "> 600"))
    (tmp_path / RULES_TEST.name).write_text(RULES_TEST.read_text())
    result = promtool("test", "rules", RULES_TEST.name, cwd=tmp_path)
    assert result.returncode == 1 and "GflowStalled" in result.stdout + result.stderr, result.stdout + result.stderr


def test_the_rules_query_only_metrics_gflowd_serves():
    import controller.sinks.metrics as metrics

    served = set(re.findall(r"``(gflow_\w+)``", metrics.__doc__))
    queried = {re.sub(r"_(bucket|sum|count)$", "", name) for name in re.findall(r"gflow_\w+", RULES.read_text())}
    assert queried and queried <= served, queried - served
