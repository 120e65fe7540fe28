"""The web dashboard over real HTTP: a real gflowd on fake GPUs with ``--web-port 0``, real jobs."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import pwd
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers import wait_for, wait_phase, write_manifest

XSS = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def held_job(name: str, gpus: int, release: Path) -> str:
    return f"""\
metadata: {{name: {name}}}
spec:
  resources: {{gpus: {gpus}}}
  script: |
    while [ ! -e {release}/{name} ]; do sleep 0.05; done
"""


def xss_job(name: str) -> str:
    # gpuType is free text that the scheduler quotes in its message: a job-provided string
    return f"metadata: {{name: {name}}}\nspec:\n  resources: {{gpus: 1, gpuType: {json.dumps(XSS)}}}\n  command: [sleep, '1']\n"


def dashboard_address(daemon) -> tuple[str, int]:
    """(host, port) of the dashboard of this gflowd, from run/web.json (port 0 picks a free one)."""

    def read():
        if daemon.proc.poll() is not None:
            raise AssertionError(f"gflowd exited with {daemon.proc.returncode}:\n{daemon.stderr()}")
        try:
            record = json.loads((daemon.home / "run" / "web.json").read_text())
        except (OSError, ValueError):
            return None
        return record if record.get("pid") == daemon.pid else None

    url = urlsplit(wait_for(read, message=lambda: f"run/web.json of gflowd {daemon.pid}\n{daemon.stderr()}")["url"])
    return url.hostname, url.port


def request(address: tuple[str, int], path: str, method: str = "GET", headers: dict | None = None):
    """(status, headers, body) of one raw HTTP request: the path is sent exactly as given."""
    conn = http.client.HTTPConnection(*address, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def state(address, hours: float | None = None) -> dict:
    status, _, body = request(address, "/api/state" + (f"?hours={hours}" if hours else ""))
    assert status == 200, body
    return json.loads(body)


def test_state_shows_gpus_queue_with_reasons_running_jobs_and_the_timeline(home, gflowd, fake_gpus, tmp_path):
    release = tmp_path / "release"
    release.mkdir()
    (home / "config.yaml").write_text("webPort: 0\n")  # the config key works like the flag
    daemon = gflowd("--fake-gpus", fake_gpus)
    address = dashboard_address(daemon)
    assert address[0] == "127.0.0.1"  # loopback unless told otherwise
    write_manifest(home / "jobs", "hold.yaml", held_job("hold", 1, release))
    wait_phase(home, "hold", "Running", daemon=daemon)
    write_manifest(home / "jobs", "big.yaml", held_job("big", 2, release))
    write_manifest(home / "jobs", "xss.yaml", xss_job("xss"))
    wait_phase(home, "big", "Pending", reason="Resources", daemon=daemon)
    wait_phase(home, "xss", "Pending", reason="Unschedulable", daemon=daemon)

    def queue_and_running():
        v = state(address)
        return v if len(v["queue"]) == 2 and v["running"] else None

    view = wait_for(queue_and_running, message="the queue and the running job in /api/state")
    gpus = {g["index"]: g for g in view["gpus"]}
    assert sorted(gpus) == [0, 1]
    assert gpus[0]["state"] == "Allocated" and gpus[0]["jobs"] == ["hold"] and gpus[0]["memory"] == 80 * 2**30
    assert gpus[1]["state"] == "Free" and gpus[1]["jobs"] == []
    assert [(r["name"], r["devices"]) for r in view["running"]] == [("hold", [0])]
    queue = {q["name"]: q for q in view["queue"]}
    assert queue["big"]["reason"] == "Resources" and "needs 2 GPUs, 1 free" in queue["big"]["message"]
    assert queue["xss"]["reason"] == "Unschedulable" and XSS in queue["xss"]["message"]  # as data, unchanged
    assert sorted(q["position"] for q in view["queue"]) == [1, 2]
    assert view["counts"] == {"Running": 1, "Pending": 2}
    rows = {r["gpu"]: r for r in view["timeline"]["rows"]}
    (bar,) = rows[0]["spans"]
    assert (bar["job"], bar["phase"], bar["end"]) == ("hold", "Running", None)
    assert view["timeline"]["start"] < bar["start"] <= view["now"]
    assert any(e["object"] == "job/hold" and e["reason"] == "Started" for e in view["events"])
    me = pwd.getpwuid(os.getuid()).pw_name  # the owner of the manifests this test wrote
    assert {q["owner"] for q in view["queue"]} == {me} and view["running"][0]["owner"] == me
    # the job view: its status, events and log tail, with job text as JSON data (`<` escaped)
    status, headers, body = request(address, "/api/job?name=xss")
    assert status == 200 and headers["content-type"] == "application/json" and b"<" not in body
    detail = json.loads(body)
    assert detail["owner"] == me and detail["status"]["status"]["reason"] == "Unschedulable"
    assert XSS in detail["status"]["status"]["message"] and detail["log"]["text"] is None
    hold = json.loads(request(address, "/api/job?name=hold")[2])
    assert hold["status"]["status"]["phase"] == "Running" and any(e["reason"] == "Started" for e in hold["events"])
    for bad in ("nope", "..%2Fconfig", "", "a%00b"):
        assert request(address, f"/api/job?name={bad}")[0] == 404, bad

    (release / "hold").touch()  # hold ends; big takes both GPUs
    wait_phase(home, "hold", "Succeeded", daemon=daemon)
    wait_phase(home, "big", "Running", daemon=daemon)

    def finished_bar():
        v = state(address)
        bars = [s for r in v["timeline"]["rows"] for s in r["spans"] if s["job"] == "hold"]
        return v if bars and bars[0]["phase"] == "Succeeded" else None

    view = wait_for(finished_bar, message="hold's bar to end in the timeline")
    (bar,) = [s for r in view["timeline"]["rows"] for s in r["spans"] if s["job"] == "hold"]
    assert bar["gpu"] == 0 and bar["start"] < bar["end"] <= view["now"]
    assert {(s["job"], s["gpu"]) for r in view["timeline"]["rows"] for s in r["spans"] if s["job"] == "big"} == {
        ("big", 0),
        ("big", 1),
    }
    assert [q["name"] for q in view["queue"]] == ["xss"]
    (release / "big").touch()


def test_page_is_served_with_a_policy_that_allows_only_its_own_script(home, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, "--web-port", "0")
    address = dashboard_address(daemon)
    status, headers, body = request(address, "/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    page = body.decode()
    (script,) = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = headers["content-security-policy"]
    assert f"script-src 'sha256-{digest}'" in policy and "default-src 'none'" in policy
    assert headers["x-content-type-options"] == "nosniff"
    assert 'fetch("api/state' in page  # the page polls the JSON endpoint, relative to where it is served


def test_json_never_carries_a_raw_angle_bracket(home, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, "--web-port", "0")
    address = dashboard_address(daemon)
    write_manifest(home / "jobs", "xss.yaml", xss_job("xss"))
    wait_phase(home, "xss", "Pending", reason="Unschedulable", daemon=daemon)

    def body_with_job():
        status, headers, body = request(address, "/api/state")
        return (headers, body) if status == 200 and b'"xss"' in body else None

    headers, body = wait_for(body_with_job, message="xss in /api/state")
    assert headers["content-type"] == "application/json"
    assert b"<" not in body  # escaped as \u003c: inert even if something took it for HTML
    assert XSS in json.loads(body)["queue"][0]["message"]


def test_read_only_and_no_path_leads_to_a_file(home, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, "--web-port", "0")
    address = dashboard_address(daemon)
    write_manifest(home / "jobs", "a.yaml", "metadata: {name: a}\nspec: {command: [sleep, '0']}\n")
    wait_phase(home, "a", "Succeeded", daemon=daemon)
    secrets = [
        (home / "status" / "a.yaml").read_bytes(),
        (home / "run" / "index.json").read_bytes()[:40],
        b"root:x:0:0",
    ]
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, _ = request(address, "/api/state", method)
        assert status == 405 and headers["allow"] == "GET, HEAD", method
    for path in (
        "/../status/a.yaml",
        "/%2e%2e/status/a.yaml",
        "/api/../../../../etc/passwd",
        "//etc/passwd",
        "/status/a.yaml",
        "/run/index.json",
        "/node.yaml",
        "/events.jsonl",
        "/jobs/a.yaml",
        "/dashboard.html",
        "/api/state/../../status/a.yaml",
        "/..%2f..%2fetc%2fpasswd",
    ):
        status, _, body = request(address, path)
        assert status == 404, path
        assert not any(secret in body for secret in secrets), path
    assert (home / "jobs" / "a.yaml").exists()


def test_host_header_must_be_loopback_while_listening_on_loopback(home, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, "--web-port", "0")
    address = dashboard_address(daemon)
    # a page elsewhere reaching 127.0.0.1 through DNS rebinding sends its own host name
    assert request(address, "/api/state", headers={"Host": f"evil.example:{address[1]}"})[0] == 421
    assert request(address, "/", headers={"Host": "attacker.test"})[0] == 421
    # what a browser sends through `ssh -L 8080:localhost:PORT`
    assert request(address, "/api/state", headers={"Host": "localhost:8080"})[0] == 200
    assert request(address, "/", headers={"Host": "[::1]:9000"})[0] == 200


def test_conditional_polls_and_bad_window(home, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, "--web-port", "0")
    address = dashboard_address(daemon)
    status, _headers, _ = request(address, "/api/state?hours=2")
    assert status == 200

    def revalidated() -> bool:
        """Unchanged state: a poll with the last ETag costs a 304 and no body. (Retried: the ETag
        also moves when a pass rewrites a file in between, and once per 30 s window tick.)"""
        etag = request(address, "/api/state?hours=2")[1]["etag"]
        status, _, body = request(address, "/api/state?hours=2", headers={"If-None-Match": etag})
        return status == 304 and body == b""

    assert wait_for(revalidated, message="a 304 for an unchanged state")
    for bad in ("abc", "0", "-1", "nan", "100000"):
        status, _, body = request(address, f"/api/state?hours={bad}")
        assert status == 400 and "hours must be" in json.loads(body)["error"], bad


def test_a_taken_port_is_a_one_line_error(home, gflowd, fake_gpus):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        daemon = gflowd("--fake-gpus", fake_gpus, "--web-port", port, ready=False)
        assert daemon.proc.wait(15) == 1
    err = daemon.stderr().strip()
    assert err == f"gflowd: --web-port {port}: cannot listen on 127.0.0.1: Address already in use", err
    assert gflowd("--fake-gpus", fake_gpus).proc.poll() is None  # the lock was released: a new gflowd starts


@pytest.mark.parametrize(
    "args, message",
    [
        (["--web-port", "70000"], "--web-port: Input should be less than or equal to 65535"),
        (["--web-port", "x"], "argument --web-port: invalid int value: 'x'"),
        # 192.0.2.0/24 is reserved for documentation: no machine has it
        (
            ["--web-port", "0", "--web-address", "192.0.2.1"],
            "--web-address 192.0.2.1: cannot listen on 192.0.2.1: Cannot assign requested address",
        ),
    ],
)
def test_bad_web_port_flags(home, gflowd, fake_gpus, args, message):
    daemon = gflowd("--fake-gpus", fake_gpus, *args, ready=False)
    assert daemon.proc.wait(15) == 1
    assert daemon.stderr().strip() == f"gflowd: {message}"


def test_stopping_gflowd_closes_the_dashboard(home, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, "--web-port", "0")
    address = dashboard_address(daemon)
    assert request(address, "/healthz")[0] == 200
    assert daemon.terminate() == 0
    assert not (home / "run" / "web.json").exists()
    with pytest.raises(ConnectionRefusedError):
        request(address, "/healthz")


def test_no_dashboard_unless_asked(home, gflowd, fake_gpus):
    gflowd("--fake-gpus", fake_gpus).wait_pass()
    assert not (home / "run" / "web.json").exists()
