"""Untrusted text never reaches a terminal raw (issue 14, finding 8b).

File names, job messages, reasons and event text come from users; a name with a terminal escape or a
newline must not repaint someone's terminal or forge a row. Every human-readable CLI output prints
such characters escaped (``\\x1b``, ``\\n``), while -o json/yaml keep the exact data. Real gflowd,
real gflowctl processes, a manifest file whose name holds an ESC sequence and a newline.
"""

from __future__ import annotations

import json

import pytest
from helpers import ctl, wait_phase, write_manifest

NASTY = "ev\x1b[2J\x1b]0;pwned\x07il\nline.yaml"  # clear screen, set the window title, a new line
SHOWN = r"ev\x1b[2J\x1b]0;pwned\x07il\nline.yaml"


def assert_clean(text: str, what: str) -> None:
    raw = sorted({c for c in text if not c.isprintable() and c != "\n"})
    assert not raw, f"{what} printed raw control characters {raw!r}:\n{text!r}"


@pytest.fixture
def nasty_jobs(home, gflowd):
    daemon = gflowd()
    write_manifest(home / "jobs", NASTY, "metadata: {name: evil}\nspec:\n  command: [sleep, '60']\n  suspend: true\n")
    # rejected: its message names the field and the file, so the file name reaches messages and events
    write_manifest(home / "jobs", "b" + NASTY, "metadata: {name: bad}\nspec:\n  command: [sleep, '60']\n  gpus: 1\n")
    wait_phase(home, "evil", "Pending", daemon=daemon)
    bad = wait_phase(home, "bad", "Rejected", daemon=daemon)
    assert NASTY in bad["message"]  # the status file keeps the exact name: escaping is for terminals only
    return home


def test_get_jobs_wide_escapes_file_names_and_messages(nasty_jobs):
    out = ctl(nasty_jobs, "get", "jobs", "-o", "wide")
    assert out.returncode == 0, out.stderr
    assert_clean(out.stdout, "get jobs -o wide")
    lines = out.stdout.splitlines()
    assert len(lines) == 3, out.stdout  # header, bad, evil: no row split by a newline
    assert lines[2].startswith("evil ") and "jobs/" + SHOWN in lines[2]
    assert lines[1].startswith("bad ") and "b" + SHOWN in lines[1]


def test_describe_escapes_the_manifest_the_message_and_conditions(nasty_jobs):
    for name in ("evil", "bad"):
        out = ctl(nasty_jobs, "describe", "job", name)
        assert out.returncode == 0, out.stderr
        assert_clean(out.stdout, f"describe job {name}")
        assert SHOWN in out.stdout
    manifest_line = [
        line for line in ctl(nasty_jobs, "describe", "job", "evil").stdout.splitlines() if line.startswith("Manifest:")
    ]
    assert manifest_line and manifest_line[0].endswith("jobs/" + SHOWN)


def test_get_events_escapes_and_json_keeps_the_exact_text(nasty_jobs):
    table = ctl(nasty_jobs, "get", "events")
    assert table.returncode == 0, table.stderr
    assert_clean(table.stdout, "get events")
    assert SHOWN in table.stdout
    exact = json.loads(ctl(nasty_jobs, "get", "events", "-o", "json").stdout)
    assert any(NASTY in event.get("message", "") for event in exact["items"])
    rows = json.loads(ctl(nasty_jobs, "get", "jobs", "-o", "json").stdout)
    assert {item["metadata"]["name"]: item["status"]["manifest"] for item in rows["items"]}["evil"] == "jobs/" + NASTY


def test_error_messages_escape_what_the_user_typed_and_file_names(nasty_jobs, tmp_path):
    missing = ctl(nasty_jobs, "apply", "-f", str(tmp_path / NASTY))
    assert missing.returncode == 1
    assert missing.stderr == f"error: {tmp_path}/{SHOWN}: no such file or folder\n"
    invalid = tmp_path / NASTY
    invalid.write_text("metadata: {name: worse}\nspec:\n  command: [sleep, '60']\n  gpus: 1\n")
    refused = ctl(nasty_jobs, "apply", "-f", str(invalid))
    assert refused.returncode == 1
    assert_clean(refused.stderr, "apply's errors")
    assert len(refused.stderr.splitlines()) == 1 and SHOWN in refused.stderr, refused.stderr
    unknown = ctl(nasty_jobs, "cancel", "no\x1b[2Jsuch")
    assert (unknown.returncode, unknown.stderr) == (1, "error: job/no\\x1b[2Jsuch not found\n")
