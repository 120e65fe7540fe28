"""Prometheus metrics: a real gflowd with ``--metrics-port``, scraped over HTTP; and the digest of
passes (what started, waited, finished) that feeds metrics, webhooks and history."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from helpers import wait_for, wait_phase, write_manifest
from prometheus_client.parser import text_string_to_metric_families

TWO_GPUS = "gpus:\n" + "".join(
    f"  - {{name: NVIDIA H100 80GB HBM3, memory: 80Gi, utilization: {u}}}\n" for u in (37, 5)
)


def held_job(name: str, gpus: int, release: Path, labels: str = "{}") -> str:
    return f"""\
metadata: {{name: {name}, labels: {labels}}}
spec:
  resources: {{gpus: {gpus}}}
  script: |
    while [ ! -e {release}/{name} ]; do sleep 0.02; done
"""


def metrics_url(daemon) -> str:
    found = wait_for(
        lambda: re.search(r"metrics on (http://\S+/metrics)", daemon.stderr()), message="the metrics URL in the log"
    )
    return found.group(1)


def scrape_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return response.read().decode()


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """sample name + sorted labels -> value"""
    text = scrape_text(url)
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, metric: str, **labels) -> float | None:
    return samples.get((metric, tuple(sorted(labels.items()))))


def two_gpu_daemon(gflowd, tmp_path):
    """A gflowd on two fake GPUs serving metrics, and the folder whose files release held jobs."""
    fake = tmp_path / "gpus.yaml"
    fake.write_text(TWO_GPUS)
    release = tmp_path / "release"
    release.mkdir()
    return gflowd("--fake-gpus", fake, "--metrics-port", "0"), release


def test_a_real_gflowd_serves_jobs_gpus_counters_and_histograms(home, gflowd, tmp_path):
    daemon, release = two_gpu_daemon(gflowd, tmp_path)
    url = metrics_url(daemon)
    assert url.startswith("http://127.0.0.1:"), "loopback by default"
    write_manifest(home / "jobs", "big.yaml", held_job("big", 1, release))
    wait_phase(home, "big", "Running", daemon=daemon)
    write_manifest(home / "jobs", "huge.yaml", held_job("huge", 2, release))
    wait_phase(home, "huge", "Pending", reason="Resources", daemon=daemon)

    def running_view():
        s = scrape(url)
        sampled = value(s, "gflow_job_gpu_utilization_percent", gpu="0", job_name="big") is not None
        return s if value(s, "gflow_jobs_pending", reason="Resources") == 1 and sampled else None

    s = first = wait_for(running_view, message="a scrape that shows the pending job")
    assert value(s, "gflow_jobs", phase="Running") == 1
    assert value(s, "gflow_jobs", phase="Pending") == 1
    assert value(s, "gflow_gpus", state="Allocated") == 1
    assert value(s, "gflow_gpus", state="Free") == 1
    assert value(s, "gflow_gpu_job_info", gpu="0", job_name="big") == 1
    assert value(s, "gflow_gpu_allocated_jobs", gpu="1") == 0
    gpu0 = {"gpu": "0", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-fake-0000-0000-0000-000000000000"}
    assert value(s, "gflow_gpu_memory_total_bytes", **gpu0) == 80 * 2**30
    assert value(s, "gflow_gpu_utilization_percent", **gpu0) == 37
    assert value(s, "gflow_jobs_started_total") == 1
    assert value(s, "gflow_queue_wait_seconds_count") == 1
    assert value(s, "gflow_reconcile_duration_seconds_count") >= 2
    assert value(s, "gflow_jobs_finished_total", phase="Succeeded") == 0
    # the job's own share: no process of it on GPU 0 in the fake file, so 0 (the GPU's 37 % is someone else's)
    assert value(s, "gflow_job_gpu_utilization_percent", gpu="0", job_name="big") == 0
    assert value(s, "gflow_job_gpu_memory_used_bytes", gpu="0", job_name="big") == 0
    assert value(s, "gflow_job_gpu_busy_seconds", job_name="big") == 0

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


@pytest.fixture
def busy(home, gflowd, tmp_path):
    """A gflowd serving metrics with a job on a GPU and one pending: every kind of series present."""
    daemon, release = two_gpu_daemon(gflowd, tmp_path)
    write_manifest(home / "jobs", "big.yaml", held_job("big", 1, release))
    write_manifest(home / "jobs", "huge.yaml", held_job("huge", 2, release))
    wait_phase(home, "huge", "Pending", reason="Resources", daemon=daemon)
    url = metrics_url(daemon)
    wait_for(lambda: value(scrape(url), "gflow_gpu_allocated_jobs", gpu="0") == 1, message="a job on GPU 0 in a scrape")
    yield url
    (release / "big").touch()
    (release / "huge").touch()


def test_no_label_is_named_job_or_instance(busy):
    """Prometheus gives every scraped series ``job`` and ``instance`` (the target's); a label of
    ours with either name would be stored as ``exported_job``/``exported_instance``."""
    labels = {
        name
        for family in text_string_to_metric_families(scrape_text(busy))
        for sample in family.samples
        for name in sample.labels
    }
    assert not labels & {"job", "instance"}, labels
    assert "gpu" in labels and "job_name" in labels  # the scrape has the per-job series


def served_names(text: str) -> set[str]:
    """The metric names a scrape has, as a query names them (a histogram by its family name)."""
    return {
        re.sub(r"_(bucket|sum|count)$", "", sample.name)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_docs_operations_metrics_table_lists_every_metric_a_real_gflowd_serves(busy):
    """docs/operations.md's table is what admins build alerts from: every name a real scrape has
    is a row there, and every row is a name gflowd serves."""
    served = served_names(scrape_text(busy))
    assert "gflow_build_info" in served and "gflow_cpu_cores" in served
    docs = (Path(__file__).parent.parent / "docs" / "operations.md").read_text()
    rows = set(re.findall(r"^\| `(gflow_\w+)` \|", docs, re.MULTILINE))
    assert served - rows == set(), f"served but not in docs/operations.md's table: {sorted(served - rows)}"
    assert rows - served == set(), f"in docs/operations.md's table but not served: {sorted(rows - served)}"


def test_build_info_names_this_gflow_and_python(busy):
    import controller

    [(labels, v)] = [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(scrape_text(busy))
        for sample in family.samples
        if sample.name == "gflow_build_info"
    ]
    assert v == 1
    assert labels == {"version": controller.__version__, "python": ".".join(map(str, sys.version_info[:3]))}


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool is not installed (Debian: apt-get install prometheus)"
)
def test_promtool_accepts_a_real_scrape(busy, tmp_path):
    text = scrape_text(busy)
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), (
        result.stdout + result.stderr
    )


def test_every_phase_and_pending_reason_is_served_at_0_from_the_first_scrape(home, gflowd):
    from controller.sinks.metrics import PENDING_REASONS, PHASES

    daemon = gflowd("--metrics-port", "0")
    s = scrape(metrics_url(daemon))
    assert {p: value(s, "gflow_jobs", phase=p) for p in PHASES} == dict.fromkeys(PHASES, 0)
    assert {r: value(s, "gflow_jobs_pending", reason=r) for r in PENDING_REASONS} == dict.fromkeys(PENDING_REASONS, 0)
    assert {value(s, "gflow_jobs_finished_total", phase=p) for p in ("Succeeded", "Failed", "Cancelled")} == {0}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Prometheus is not installed (Debian: apt-get install prometheus)"
)
def test_a_real_prometheus_stores_our_labels_as_served_and_runs_the_dashboards_queries(busy, tmp_path):
    """Prometheus scrapes gflowd: ``gflow_gpu_job_info`` keeps ``job_name`` (no ``exported_job``)
    beside the scrape's own ``job``; every query of the shipped Grafana dashboard evaluates."""
    target = busy.split("//")[1].split("/")[0]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: gflow\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = _free_port()
    log = open(tmp_path / "prometheus.log", "w")
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
    api = f"http://127.0.0.1:{port}/api/v1/query?query="

    def query(expr: str) -> list[dict] | None:
        try:
            with urllib.request.urlopen(api + urllib.parse.quote(expr), timeout=5) as response:
                answer = json.load(response)
        except OSError:
            return None
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]

    try:
        [series] = wait_for(
            lambda: query("gflow_gpu_job_info"),
            timeout=60,
            interval=0.2,
            message=lambda: "Prometheus to scrape gflowd: " + (tmp_path / "prometheus.log").read_text()[-2000:],
        )
        labels = series["metric"]
        assert (labels["job"], labels["instance"], labels["job_name"], labels["gpu"]) == (
            "gflow",
            target,
            "big",
            "0",
        ), labels
        assert not any(name.startswith("exported_") for name in labels), labels
        assert query('gflow_gpu_job_info{job_name="big"}')  # the query docs/operations.md shows
        dashboard = json.loads(
            (Path(__file__).parent.parent / "manifests" / "deploy" / "grafana-dashboard.json").read_text()
        )
        for panel in dashboard["panels"]:
            for t in panel["targets"]:
                expr = t["expr"].replace("$__rate_interval", "1m")
                assert query(expr) is not None, expr
    finally:
        server.terminate()
        server.wait(30)
        log.close()


@pytest.mark.e2e
def test_a_taken_metrics_port_is_a_one_line_error(home, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "controller.daemon", "--home", str(home), "--metrics-port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip().splitlines()[-1]]
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.e2e
@pytest.mark.parametrize(
    "flag, value_, message",
    [
        ("--metrics-port", "70000", "--metrics-port: Input should be less than or equal to 65535"),
        ("--metrics-port", "x", "invalid int value"),
    ],
)
def test_bad_metrics_flags(home, flag, value_, message):
    result = subprocess.run(
        [sys.executable, "-m", "controller.daemon", "--home", str(home), flag, value_],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr


def test_the_grafana_dashboard_only_queries_metrics_gflowd_serves():
    """Every gflow_* series the sample dashboard queries is one the metrics module defines, and
    no panel reads a per-job label by the name Prometheus keeps for the target (``job``)."""
    import json

    import controller.sinks.metrics as metrics

    dashboard = json.loads(
        (Path(__file__).parent.parent / "manifests" / "deploy" / "grafana-dashboard.json").read_text()
    )
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queried = {re.sub(r"_(bucket|sum|count)$", "", name) for e in exprs for name in re.findall(r"gflow_\w+", e)}
    served = set(re.findall(r"``(gflow_\w+)``", metrics.__doc__))
    assert queried and queried <= served, queried - served
    assert not [e for e in exprs if re.search(r"\b(exported_)?job\b", e)], "a query reads the scrape's job label"
    assert "job_name" in json.dumps(dashboard)  # the table shows our per-job label


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
        s = wait_for(
            lambda: (lambda v: v if value(v, "gflow_jobs_finished_total", phase="Succeeded") == 1 else None)(
                scrape(url)
            ),
            message="a scrape counting the finished job",
        )
        assert value(s, "gflow_jobs", phase="Succeeded") == 1
