"""Prometheus metrics: a real gflowd with ``--metrics-port``, scraped over HTTP; and the digest of
passes (what started, waited, finished) that feeds metrics, webhooks and history."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from helpers import wait_for, wait_phase, write_manifest
from prometheus_client.parser import text_string_to_metric_families

TWO_GPUS = "gpus:\n" + "".join(f"  - {{name: NVIDIA H100 80GB HBM3, memory: 80Gi, utilization: {u}}}\n" for u in (37, 5))


def held_job(name: str, gpus: int, release: Path, labels: str = "{}") -> str:
    return f"""\
metadata: {{name: {name}, labels: {labels}}}
spec:
  resources: {{gpus: {gpus}}}
  script: |
    while [ ! -e {release}/{name} ]; do sleep 0.02; done
"""


def metrics_url(daemon) -> str:
    found = wait_for(lambda: re.search(r"metrics on (http://\S+/metrics)", daemon.stderr()), message="the metrics URL in the log")
    return found.group(1)


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """sample name + sorted labels -> value"""
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, metric: str, **labels) -> float | None:
    return samples.get((metric, tuple(sorted(labels.items()))))


def test_a_real_gflowd_serves_jobs_gpus_counters_and_histograms(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text(TWO_GPUS)
    release = tmp_path / "release"
    release.mkdir()
    daemon = gflowd("--fake-gpus", fake, "--metrics-port", "0")
    url = metrics_url(daemon)
    assert url.startswith("http://127.0.0.1:"), "loopback by default"
    write_manifest(home / "jobs", "big.yaml", held_job("big", 1, release))
    wait_phase(home, "big", "Running", daemon=daemon)
    write_manifest(home / "jobs", "huge.yaml", held_job("huge", 2, release))
    wait_phase(home, "huge", "Pending", reason="Resources", daemon=daemon)

    def running_view():
        s = scrape(url)
        return s if value(s, "gflow_jobs_pending", reason="Resources") == 1 else None

    s = first = wait_for(running_view, message="a scrape that shows the pending job")
    assert value(s, "gflow_jobs", phase="Running") == 1
    assert value(s, "gflow_jobs", phase="Pending") == 1
    assert value(s, "gflow_gpus", state="Allocated") == 1
    assert value(s, "gflow_gpus", state="Free") == 1
    assert value(s, "gflow_gpu_job_info", gpu="0", job="big") == 1
    assert value(s, "gflow_gpu_allocated_jobs", gpu="1") == 0
    gpu0 = {"gpu": "0", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-fake-0000-0000-0000-000000000000"}
    assert value(s, "gflow_gpu_memory_total_bytes", **gpu0) == 80 * 2**30
    assert value(s, "gflow_gpu_utilization_percent", **gpu0) == 37
    assert value(s, "gflow_jobs_started_total") == 1
    assert value(s, "gflow_queue_wait_seconds_count") == 1
    assert value(s, "gflow_reconcile_duration_seconds_count") >= 2
    assert value(s, "gflow_jobs_finished_total", phase="Succeeded") == 0

    (release / "big").touch()
    wait_phase(home, "huge", "Running", daemon=daemon)  # the big job ended; the 2-GPU job took both GPUs
    (release / "huge").touch()
    wait_phase(home, "huge", "Succeeded", daemon=daemon)

    def finished_view():
        s = scrape(url)
        return s if value(s, "gflow_jobs_finished_total", phase="Succeeded") == 2 else None

    s = wait_for(finished_view, message="both jobs counted as finished")
    assert value(s, "gflow_jobs_started_total") == 2
    assert value(s, "gflow_queue_wait_seconds_count") == 2
    assert value(s, "gflow_queue_wait_seconds_sum") > 0  # huge waited for big to finish
    assert value(s, "gflow_jobs", phase="Succeeded") == 2
    assert value(s, "gflow_gpus", state="Free") == 2
    assert value(s, "gflow_jobs_finished_total", phase="Failed") == 0
    import controller.sinks.metrics as metrics

    documented = set(re.findall(r"``(gflow_\w+)``", metrics.__doc__))
    served = {re.sub(r"_(bucket|sum|count)$", "", name) for name, _ in {**first, **s}}
    assert documented == served, documented ^ served


def test_a_taken_metrics_port_is_a_one_line_error(home, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "controller.daemon", "--home", str(home), "--metrics-port", str(port)],
            capture_output=True, text=True, timeout=30,
        )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip().splitlines()[-1]]
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag, value_, message", [
    ("--metrics-port", "70000", "--metrics-port: Input should be less than or equal to 65535"),
    ("--metrics-port", "x", "invalid int value"),
])
def test_bad_metrics_flags(home, flag, value_, message):
    result = subprocess.run(
        [sys.executable, "-m", "controller.daemon", "--home", str(home), flag, value_],
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr


def test_the_grafana_dashboard_only_queries_metrics_gflowd_serves():
    """Every gflow_* series the sample dashboard queries is one the metrics module defines."""
    import json

    import controller.sinks.metrics as metrics

    dashboard = json.loads((Path(__file__).parent.parent / "manifests" / "deploy" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queried = {re.sub(r"_(bucket|sum|count)$", "", name) for e in exprs for name in re.findall(r"gflow_\w+", e)}
    served = set(re.findall(r"``(gflow_\w+)``", metrics.__doc__))
    assert queried and queried <= served, queried - served


def test_a_stuck_scraper_does_not_hold_up_the_loop_or_other_scrapes(home, gflowd):
    """A client that opens a connection and never finishes its request ties up one server thread
    only: jobs still start and finish, and another scrape is answered."""
    daemon = gflowd("--metrics-port", "0")
    url = metrics_url(daemon)
    host, port = url.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as stuck:
        stuck.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # the request never ends
        write_manifest(home / "jobs", "quick.yaml", "metadata: {name: quick}\nspec:\n  command: [true]\n")
        wait_phase(home, "quick", "Succeeded", daemon=daemon)
        s = wait_for(lambda: (lambda v: v if value(v, "gflow_jobs_finished_total", phase="Succeeded") == 1 else None)(scrape(url)),
                     message="a scrape counting the finished job")
        assert value(s, "gflow_jobs", phase="Succeeded") == 1
