"""Webhooks end to end: a real gflowd posts to local HTTP servers (127.0.0.1, port 0): a healthy
one, one that fails twice before it answers (retried), and one that never answers (it must not
stall gflowd or the other webhooks). Plus config errors and the matching rules."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import wait_for, wait_phase, write_manifest

from controller.api.labels import parse_selector, selector_matches


class Endpoints:
    """/ok records posts; /flaky answers 500 to its first two posts; /hang never answers."""

    def __init__(self):
        self.posts: dict[str, list[dict]] = {"/ok": [], "/flaky": [], "/vision": []}
        self.flaky_tries = 0
        self.hanging = 0
        self.release = threading.Event()
        endpoints = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert self.headers["Content-Type"] == "application/json"
                if self.path == "/hang":
                    endpoints.hanging += 1
                    endpoints.release.wait(60)
                    return
                if self.path == "/flaky":
                    endpoints.flaky_tries += 1
                    if endpoints.flaky_tries <= 2:
                        self.send_response(500)
                        self.end_headers()
                        return
                endpoints.posts[self.path].append(body)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoints():
    server = Endpoints()
    yield server
    server.close()


def job(name: str, exit_code: int, labels: str = "{}") -> str:
    return f"metadata: {{name: {name}, labels: {labels}}}\nspec:\n  command: [sh, -c, 'exit {exit_code}']\n"


def test_webhooks_are_posted_retried_and_a_hanging_one_stalls_nothing(home, gflowd, endpoints):
    (home / "config.yaml").write_text(f"""\
webhooks:
  - url: {endpoints.base}/hang
    events: [Succeeded, Failed]
    timeout: 60s
    retries: 0
  - url: {endpoints.base}/ok
    events: [Succeeded, Failed]
  - url: {endpoints.base}/flaky
    events: [Failed]
    retries: 3
  - url: {endpoints.base}/vision
    events: [Succeeded]
    selector: team=vision
""")
    daemon = gflowd()
    write_manifest(home / "jobs", "first.yaml", job("first", 0, "{team: vision}"))
    wait_phase(home, "first", "Succeeded", daemon=daemon)
    wait_for(lambda: endpoints.hanging == 1, message="the hanging endpoint to be called")
    # the hanging endpoint holds its worker; gflowd and the other webhooks carry on
    write_manifest(home / "jobs", "second.yaml", job("second", 3, "{team: nlp}"))
    wait_phase(home, "second", "Failed", daemon=daemon)
    write_manifest(home / "jobs", "third.yaml", job("third", 0, "{team: nlp}"))
    wait_phase(home, "third", "Succeeded", daemon=daemon)

    wait_for(lambda: len(endpoints.posts["/ok"]) == 3, message=lambda: f"three posts to /ok: {endpoints.posts['/ok']}")
    by_name = {p["job"]["name"]: p for p in endpoints.posts["/ok"]}
    assert set(by_name) == {"first", "second", "third"}
    second = by_name["second"]
    assert second["kind"] == "JobEvent"
    assert (second["job"]["phase"], second["job"]["reason"], second["job"]["exitCode"]) == ("Failed", "Error", 3)
    assert second["job"]["labels"] == {"team": "nlp"}
    assert "job second Failed" in second["text"]
    # /flaky wants only Failed: two 500s, then the retry lands
    wait_for(lambda: len(endpoints.posts["/flaky"]) == 1, timeout=20, message="the retried post")
    assert endpoints.flaky_tries == 3 and endpoints.posts["/flaky"][0]["job"]["name"] == "second"
    # the selector: only the vision job
    wait_for(lambda: endpoints.posts["/vision"], message="the vision post")
    assert [p["job"]["name"] for p in endpoints.posts["/vision"]] == ["first"]
    assert endpoints.hanging == 1  # its worker is still stuck on the first notification
    # and a stop is not held up by the hanging request
    assert daemon.terminate(timeout=10) == 0


@pytest.mark.e2e
@pytest.mark.parametrize(
    "config, message",
    [
        ("webhooks:\n  - url: ftp://x\n", "webhooks.0.url: 'ftp://x' is not an http:// or https:// URL"),
        ("webhooks:\n  - url: http://h/x\n    events: [failed]\n", "'failed' is not a phase or reason"),
        ("webhooks:\n  - url: http://h/x\n    selector: team\n", "bad label selector term 'team'"),
        ("webhooks:\n  - url: http://h/x\n    timeout: 0s\n", "webhooks.0.timeout"),
        ("webhooks:\n  - {}\n", "webhooks.0.url"),
    ],
)
def test_bad_webhook_config_is_a_one_line_error(home, config, message):
    (home / "config.yaml").write_text(config)
    result = subprocess.run(
        [sys.executable, "-m", "controller.daemon", "--home", str(home)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_selector_matching():
    terms = parse_selector("team=vision, tier!=low")
    assert selector_matches(terms, {"team": "vision"})
    assert not selector_matches(terms, {"team": "vision", "tier": "low"})
    assert not selector_matches(terms, {"team": "nlp"})
    assert selector_matches(parse_selector(""), {})
    with pytest.raises(ValueError):
        parse_selector("=x")


def test_webhooks_are_not_a_flag():
    from controller.daemon.main import build_parser

    assert "--webhooks" not in build_parser().format_help()
    assert "--metrics-port" in build_parser().format_help()


def test_a_full_queue_drops_instead_of_waiting(endpoints, monkeypatch):
    import time

    import controller.sinks.notify as notify
    from controller.api.config import Webhook
    from controller.model.records import JobState
    from controller.sinks.hooks import PassFacts, PassRecord, Transition

    monkeypatch.setattr(notify, "QUEUE_SIZE", 2)
    notifier = notify.Notifier([Webhook(url=f"{endpoints.base}/hang", timeout=60.0, retries=0)], host="box")
    facts = PassFacts(PassRecord({}, None, {}, None, 1.0, 0.0))
    facts.transitions = [
        Transition(f"j{i}", "Running", JobState(name=f"j{i}", phase="Failed", reason="Error")) for i in range(50)
    ]
    began = time.monotonic()
    notifier.consume(facts)
    assert time.monotonic() - began < 1.0
    target = notifier.targets[0]
    wait_for(lambda: endpoints.hanging == 1, message="the first post to hang")
    assert target.dropped >= 50 - 2 - 1  # one in flight, two queued, the rest dropped
    began = time.monotonic()
    notifier.close()
    assert time.monotonic() - began < notify.DRAIN_ON_CLOSE + 1


def test_the_config_examples_in_the_docs_load(tmp_path):
    import re
    import textwrap
    from pathlib import Path

    from controller.api.config import load_config

    docs = (Path(__file__).parent.parent / "docs" / "operations.md").read_text()
    blocks = [
        textwrap.dedent(b)
        for b in re.findall(r"```yaml\n(.*?)```", docs, re.S)
        if "webhooks:" in b or "metricsPort" in b
    ]
    assert len(blocks) >= 2
    for number, block in enumerate(blocks):
        path = tmp_path / f"config{number}.yaml"
        path.write_text(block)
        config = load_config(path, {})
        assert config.webhooks or config.metrics_port


def test_logs_name_a_webhook_without_its_secret_path():
    from controller.sinks.notify import redacted

    assert redacted("https://chat.example.org/hooks/T01/B02/SECRET") == "https://chat.example.org/…"
    assert redacted("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert redacted("http://h:1/?token=abc") == "http://h:1/…"
