"""``gflowctl get jobs -w`` against a real gflowd, its output on a pipe as a script reads it:
``-o json|yaml|name`` stream one object (or name) per change, as kubectl does; table rows printed
later line up with the header printed first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import wait_for, wait_phase, write_manifest

from controller.util.yamlio import load_all


def watch(home: Path, *argv: str):
    env = {**os.environ, "GFLOW_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", "get", "jobs", "-w", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    out: list[str] = []
    threading.Thread(target=lambda: out.extend(iter(lambda: proc.stdout.read(1), "")), daemon=True).start()
    return proc, out


def stop(proc) -> None:
    proc.send_signal(signal.SIGINT)
    assert proc.wait(20) == 0, proc.stderr.read()


def job(name: str, go: Path) -> str:
    return f"metadata: {{name: {name}}}\nspec:\n  command: [sh, -c, 'while [ ! -e {go} ]; do sleep 0.05; done']\n"


@pytest.mark.parametrize("output", ["json", "yaml", "name"])
def test_watch_with_an_output_format_streams_one_object_per_change(home, gflowd, tmp_path, output):
    daemon = gflowd()
    go = tmp_path / "go"
    write_manifest(home / "jobs", "w.yaml", job("w", go))
    wait_phase(home, "w", "Running", daemon=daemon)
    proc, out = watch(home, "-o", output)
    try:
        # the whole first object, not its first bytes ("---" may come alone): the job must still run
        first = "job/w" if output == "name" else "Running"
        wait_for(lambda: first in "".join(out), message=lambda: f"the first object, got {''.join(out)!r}")
        go.touch()
        wait_phase(home, "w", "Succeeded", daemon=daemon)

        def phases():
            text = "".join(out)
            if output == "json":
                decoder, docs, at = json.JSONDecoder(), [], 0
                while text[at:].strip():
                    at += len(text[at:]) - len(text[at:].lstrip())
                    doc, at = decoder.raw_decode(text, at)
                    docs.append(doc)
                return [(d["metadata"]["name"], d["status"]["phase"]) for d in docs]
            if output == "yaml":
                return [(d["metadata"]["name"], d["status"]["phase"]) for d in load_all(text) if d]
            return text.splitlines()

        want = [("w", "Running"), ("w", "Succeeded")] if output != "name" else ["job/w", "job/w"]
        wait_for(lambda: phases() == want, message=lambda: f"{want}, got {''.join(out)!r}")
    finally:
        stop(proc)


def test_watch_rows_line_up_with_the_header(home, gflowd, tmp_path):
    daemon = gflowd()
    go = tmp_path / "go"
    write_manifest(home / "jobs", "a-job-with-a-long-name.yaml", job("a-job-with-a-long-name", go))
    wait_phase(home, "a-job-with-a-long-name", "Running", daemon=daemon)
    proc, out = watch(home)
    try:
        wait_for(lambda: len("".join(out).splitlines()) >= 2, message="the table")
        write_manifest(home / "jobs", "b.yaml", job("b", go))  # a shorter name, printed later
        wait_for(lambda: any(ln.startswith("b ") for ln in "".join(out).splitlines()), message=lambda: "".join(out))
    finally:
        stop(proc)
    lines = "".join(out).splitlines()
    header = lines[0]
    starts = [header.index(word) for word in header.split()[:4]]
    assert [line.split()[0] for line in lines[1:]] == ["a-job-with-a-long-name", "b"], lines
    for line in lines[1:]:
        assert all(line[at - 1] == " " and line[at] != " " for at in starts[1:4]), f"\n{header}\n{line}"
