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


@pytest.mark.e2e
@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Prometheus is not installed (Debian: apt-get install prometheus)"
)
def test_a_real_prometheus_loads_the_rules_and_a_stopped_gflowd_raises_gflow_down(home, gflowd, tmp_path):
    """Prometheus loads the file as ``rule_files`` and evaluates every rule against a real gflowd
    without error; nothing alerts while gflowd answers; once gflowd stops answering (SIGSTOP),
    GflowDown is pending (it fires after its 5 minutes, which the unit test covers)."""
    import json
    import os
    import signal
    import urllib.request

    from helpers import wait_for
    from test_metrics import _free_port, metrics_url

    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n")
    daemon = gflowd("--fake-gpus", fake, "--metrics-port", "0")
    target = metrics_url(daemon).split("//")[1].split("/")[0]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        f"scrape_configs:\n  - job_name: gflow\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = _free_port()
    log_path = tmp_path / "prometheus.log"
    log = open(log_path, "w")
    server = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
    )

    def api(path: str):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}", timeout=5) as response:
                answer = json.load(response)
        except OSError:
            return None
        assert answer["status"] == "success", answer
        return answer["data"]

    def evaluated_rules():
        data = api("rules")
        rules = [r for g in (data or {}).get("groups", []) for r in g["rules"]]
        scraped = api("query?query=up")
        if len(rules) == 5 and all(r["lastEvaluation"] > "2000" for r in rules) and scraped and scraped["result"]:
            return rules
        return None

    stopped = False
    try:
        rules = wait_for(
            evaluated_rules,
            timeout=90,
            interval=0.2,
            message=lambda: "Prometheus to load and evaluate the rules: " + log_path.read_text()[-2000:],
        )
        assert {r["name"] for r in rules} == {
            "GflowDown",
            "GflowStalled",
            "GflowUnhealthyGpu",
            "GflowLongQueue",
            "GflowJobsFailing",
        }
        assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
        # a second round of evaluations after the first scrape: still nothing to say about a healthy gflowd
        first = {r["name"]: r["lastEvaluation"] for r in rules}
        wait_for(
            lambda: (again := evaluated_rules()) and all(r["lastEvaluation"] != first[r["name"]] for r in again),
            timeout=60,
            message="another evaluation",
        )
        assert api("alerts")["alerts"] == []
        os.kill(daemon.pid, signal.SIGSTOP)  # the scrape now times out, as for a hung gflowd
        stopped = True
        wait_for(
            lambda: [a for a in api("alerts")["alerts"] if a["labels"]["alertname"] == "GflowDown"],
            timeout=90,
            interval=0.2,
            message="GflowDown pending while gflowd does not answer",
        )
        [alert] = api("alerts")["alerts"]
        assert alert["state"] == "pending" and alert["labels"]["instance"] == target, alert
    finally:
        if stopped:
            os.kill(daemon.pid, signal.SIGCONT)
        server.terminate()
        server.wait(30)
        log.close()
