"""``gflowctl get -o yaml|json`` prints objects that can be applied again, as kubectl's
``get -o yaml | kubectl apply -f -`` round-trips: each is the manifest's document (apiVersion, kind,
metadata, spec) with gflowd's status. Applied back, ``status`` and the read-only metadata are
ignored, an object that asks for nothing new is ``unchanged`` and leaves the stored file (its
comments) alone, a ``kind: List`` restores what was deleted, and a Sweep's children are skipped
with a line saying why. Real gflowd, real gflowctl processes, reading a pipe."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import helpers
import pytest
from helpers import read_status, wait_for, wait_phase, write_manifest

from controller.util.yamlio import load_all, load_one

COMMENTED = """\
# the user's own notes: apply of a read-back object must keep them
apiVersion: gflow.dev/v1alpha1
kind: Job
metadata:
  name: train
  labels: {team: vision}
spec:
  script: |
    echo "epoch 1"
    echo done   # a comment inside the script is text, kept as such
  workingDir: .            # relative: the manifest's own folder
  env: {LR: "0.01"}
  startAfter: 2020-01-01T00:00:00   # bare: a date to YAML's loader
  priority: 3
"""


def ctl(home: Path, *argv: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return helpers.ctl(home, *argv, stdin=stdin, cwd=cwd, timeout=120)


def parsed(text: str, output: str):
    return json.loads(text) if output == "json" else load_all(text)[0]


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_a_job_read_back_applies_unchanged_and_its_file_keeps_its_comments(home, gflowd, tmp_path, output):
    gflowd()
    manifest = write_manifest(home / "jobs", "train.yaml", COMMENTED)
    before = manifest.read_bytes()
    wait_phase(home, "train", "Succeeded")
    got = ctl(home, "get", "job", "train", "-o", output)
    assert got.returncode == 0, got.stderr
    obj = parsed(got.stdout, output)
    assert obj["kind"] == "Job" and obj["apiVersion"] == "gflow.dev/v1alpha1"
    assert obj["metadata"]["labels"] == {"team": "vision"} and obj["metadata"]["user"]
    assert obj["spec"]["script"] == 'echo "epoch 1"\necho done   # a comment inside the script is text, kept as such\n'
    assert obj["spec"]["startAfter"] == "2020-01-01T00:00:00" and obj["status"]["phase"] == "Succeeded"
    elsewhere = tmp_path / "elsewhere"  # applied from another folder: workingDir is not moved there
    elsewhere.mkdir()
    back = ctl(home, "apply", "-f", "-", stdin=got.stdout, cwd=elsewhere)
    assert (back.returncode, back.stdout, back.stderr) == (0, "job/train unchanged\n", "")
    assert manifest.read_bytes() == before
    status = read_status(home, "train")["status"]
    assert status["phase"] == "Succeeded" and status["observedGeneration"] == 1  # not run again


def test_a_read_back_object_with_a_change_is_stored_without_status_or_read_only_metadata(home, gflowd):
    gflowd()
    write_manifest(home / "jobs", "train.yaml", COMMENTED)
    wait_phase(home, "train", "Succeeded")
    text = ctl(home, "get", "job", "train", "-o", "yaml").stdout
    assert "\n  priority: 3\n" in text
    back = ctl(home, "apply", "-f", "-", stdin=text.replace("\n  priority: 3\n", "\n  priority: 7\n"))
    assert (back.returncode, back.stdout) == (0, "job/train configured\n"), back.stderr
    stored = load_one((home / "jobs" / "train.yaml").read_text())
    assert "status" not in stored and set(stored["metadata"]) == {"name", "labels"}
    assert stored["spec"]["priority"] == 7 and stored["spec"]["workingDir"] == "."


def test_a_list_read_back_restores_a_deleted_job_and_skips_a_sweeps_children(home, gflowd):
    gflowd()
    write_manifest(home / "jobs", "a.yaml", "metadata: {name: a}\nspec:\n  command: [echo, a]\n")
    write_manifest(home / "jobs", "b.yaml", "metadata: {name: b}\nspec:\n  command: [echo, b]\n")
    write_manifest(
        home / "jobs",
        "grid.yaml",
        "kind: Sweep\nmetadata: {name: grid}\nspec:\n  matrix: {x: [1, 2]}\n"
        "  template:\n    command: [sh, -c, 'echo $x']\n",
    )
    for name in ("a", "b", "grid-0", "grid-1"):
        wait_phase(home, name, "Succeeded")
    saved = ctl(home, "get", "jobs", "-o", "yaml").stdout
    listed = load_all(saved)[0]
    assert listed["kind"] == "List" and sorted(i["metadata"]["name"] for i in listed["items"]) == [
        "a",
        "b",
        "grid-0",
        "grid-1",
    ]
    child = next(i for i in listed["items"] if i["metadata"]["name"] == "grid-0")
    assert "spec" not in child and child["metadata"]["ownerReferences"][0]["name"] == "grid"
    assert ctl(home, "delete", "job", "a").returncode == 0
    wait_for(lambda: read_status(home, "a") is None, message="job a's status removed")
    back = ctl(home, "apply", "-f", "-", stdin=saved)
    assert back.returncode == 0, back.stderr
    assert sorted(back.stdout.splitlines()) == [
        "job/a created",
        "job/b unchanged",
        "job/grid-0 skipped",
        "job/grid-1 skipped",
    ]
    assert back.stderr.count("owned by sweep/grid; apply the Sweep to change it") == 2
    assert load_one((home / "jobs" / "a.yaml").read_text())["spec"] == {"command": ["echo", "a"]}
    wait_phase(home, "a", "Succeeded")
    sweeps = ctl(home, "get", "sweep", "grid", "-o", "json").stdout
    assert json.loads(sweeps)["kind"] == "Sweep" and json.loads(sweeps)["spec"]["matrix"] == {"x": [1, 2]}
    again = ctl(home, "apply", "-f", "-", stdin=sweeps)
    assert (again.returncode, again.stdout) == (0, "sweep/grid unchanged\n"), again.stderr


def test_a_file_carrying_a_status_dropped_into_the_spec_dir_runs(home, gflowd):
    """What ``get -o yaml`` printed, saved straight into jobs/ (a GitOps repo of read-back objects)."""
    gflowd()
    write_manifest(
        home / "jobs",
        "saved.yaml",
        "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: saved\n  user: someone\n"
        '  creationTimestamp: "2026-01-01T00:00:00Z"\nspec:\n  command: ["true"]\n'
        "status:\n  phase: Failed\n  reason: Error\n",
    )
    wait_phase(home, "saved", "Succeeded")


def test_a_manifest_changed_after_a_listing_shows_its_new_spec(home, gflowd):
    """The specs ``get`` keeps in its cache are those of the files as they are now."""
    gflowd()
    for i in range(10):  # a listing of more than a few: the cache is read and written
        write_manifest(home / "jobs", f"j{i}.yaml", f"metadata: {{name: j{i}}}\nspec:\n  command: [echo, '{i}']\n")
    for i in range(10):
        wait_phase(home, f"j{i}", "Succeeded")
    first = json.loads(ctl(home, "get", "jobs", "-o", "json").stdout)
    assert {i["metadata"]["name"]: i["spec"]["command"] for i in first["items"]}["j3"] == ["echo", "3"]
    write_manifest(home / "jobs", "j3.yaml", "metadata: {name: j3}\nspec:\n  command: [echo, changed]\n")
    wait_for(
        lambda: (
            {
                i["metadata"]["name"]: i["spec"]["command"]
                for i in json.loads(ctl(home, "get", "jobs", "-o", "json").stdout)["items"]
            }["j3"]
            == ["echo", "changed"]
        ),
        message="the new spec of j3",
    )
