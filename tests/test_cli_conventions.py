"""kubectl's output conventions, checked with the tools users pipe gflowctl into: ``-o yaml`` is one
``kind: List`` document (PyYAML's ``safe_load`` reads it) carrying what ``-o json`` carries;
``TYPE/NAME`` (what ``-o name`` prints) is accepted wherever a name is, so ``get jobs -o name |
xargs gflowctl describe`` works; verbs that act on jobs take several names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # PyYAML: the reader the issue tried; installed with kubernetes-validate (test extra)
from helpers import ctl, wait_for, wait_phase

JOB = """\
apiVersion: gflow.dev/v1alpha1
kind: Job
metadata:
  name: {name}
  labels: {{team: {team}}}
spec:
  command: {command}
"""
SWEEP = """\
apiVersion: gflow.dev/v1alpha1
kind: Sweep
metadata: {name: grid}
spec:
  template:
    command: [sh, -c, "echo lr={lr}"]
  matrix:
    lr: ["0.1", "0.01"]
"""


def shell(home: Path, pipeline: str) -> subprocess.CompletedProcess:
    """``pipeline`` run by sh with this checkout's ``gflowctl`` first on PATH (xargs execs a program)."""
    bindir = home.parent / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "gflowctl"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m controller.cli.main "$@"\n')
    script.chmod(0o755)
    env = {**os.environ, "GFLOW_HOME": str(home), "PATH": f"{bindir}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", pipeline], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def finished(home, gflowd):
    """A real gflowd that ran two jobs and a two-child sweep to the end."""
    daemon = gflowd()
    jobs = home / "jobs"
    (jobs / "alpha.yaml").write_text(JOB.format(name="alpha", team="vision", command="[sh, -c, 'echo alpha out']"))
    (jobs / "beta.yaml").write_text(JOB.format(name="beta", team="nlp", command="[sh, -c, 'echo beta out; exit 3']"))
    (jobs / "grid.yaml").write_text(SWEEP)
    wait_phase(home, "alpha", "Succeeded", daemon=daemon)
    wait_phase(home, "beta", "Failed", daemon=daemon)
    for child in ("grid-0", "grid-1"):
        wait_phase(home, child, "Succeeded", daemon=daemon)
    return daemon


def test_get_o_name_piped_to_xargs_describe_describes_every_job(home, finished):
    listed = shell(home, "gflowctl get jobs -o name")
    assert listed.stdout.split() == ["job/alpha", "job/beta", "job/grid-0", "job/grid-1"], listed.stderr
    described = shell(home, "gflowctl get jobs -o name | xargs gflowctl describe")
    assert described.returncode == 0, described.stderr
    assert described.stderr == ""
    blocks = described.stdout.split("\n\n")  # one block per job, a blank line between, as kubectl does
    assert [b.splitlines()[0].split() for b in blocks] == [["Name:", n] for n in ("alpha", "beta", "grid-0", "grid-1")]
    assert "Exit Code:" in blocks[1] and "3" in blocks[1].split("Exit Code:")[1].splitlines()[0]

    sweeps = shell(home, "gflowctl get sweeps -o name | xargs gflowctl describe")
    assert sweeps.returncode == 0, sweeps.stderr
    assert sweeps.stdout.splitlines()[0].split() == ["Name:", "grid"]
    assert "Succeeded=2" in sweeps.stdout
    assert [line.split() for line in sweeps.stdout.splitlines() if line.startswith("  grid-")] == [
        ["grid-0", "Succeeded"],
        ["grid-1", "Succeeded"],
    ]


def test_o_yaml_is_one_list_document_with_the_items_of_o_json(home, finished):
    for kind in ("jobs", "sweeps"):
        as_json = json.loads(ctl(home, "get", kind, "-o", "json").stdout)
        as_yaml = yaml.safe_load(ctl(home, "get", kind, "-o", "yaml").stdout)
        assert as_yaml["apiVersion"] == "v1" and as_yaml["kind"] == "List"
        assert as_yaml == as_json
        assert len(as_json["items"]) == (4 if kind == "jobs" else 1)
    one = ctl(home, "get", "jobs", "job/beta", "-o", "yaml")
    assert yaml.safe_load(one.stdout) == json.loads(ctl(home, "get", "job/beta", "-o", "json").stdout)
    assert yaml.safe_load(one.stdout)["status"]["exitCode"] == 3  # one object asked for by name: itself
    two = yaml.safe_load(ctl(home, "get", "job/alpha", "jobs/beta", "-o", "yaml").stdout)
    assert [item["metadata"]["name"] for item in two["items"]] == ["alpha", "beta"]


def test_type_slash_name_is_accepted_by_the_reading_verbs(home, finished):
    assert ctl(home, "get", "jobs", "job/alpha", "-o", "name").stdout == "job/alpha\n"
    assert ctl(home, "get", "j/alpha", "-o", "name").stdout == "job/alpha\n"
    assert ctl(home, "get", "sweep/grid", "-o", "name").stdout == "sweep/grid\n"
    assert ctl(home, "logs", "job/alpha").stdout == "alpha out\n"
    assert ctl(
        home, "wait", "job/alpha", "jobs/grid-0", "sweep/grid", "--for=phase=Succeeded", "--timeout", "5s"
    ).stdout.splitlines() == ["job/alpha Succeeded", "job/grid-0 Succeeded", "sweep/grid Succeeded"]
    exported = ctl(home, "export", "slurm", "job/alpha")
    assert exported.returncode == 0 and "#SBATCH --job-name=alpha" in exported.stdout, exported.stderr


def test_acting_verbs_take_several_type_slash_names(home, finished):
    jobs = home / "jobs"
    done = ctl(home, "rerun", "job/alpha", "beta")
    assert done.stdout.splitlines() == ["job/alpha rerun requested", "job/beta rerun requested"], done.stderr
    assert all("gflow.dev/rerun" in (jobs / f"{n}.yaml").read_text() for n in ("alpha", "beta"))
    held = ctl(home, "suspend", "job/alpha", "sweep/grid")
    assert held.stdout.splitlines() == ["job/alpha suspended", "sweep/grid suspended"], held.stderr
    assert "suspend: true" in (jobs / "alpha.yaml").read_text() and "suspend: true" in (jobs / "grid.yaml").read_text()
    assert ctl(home, "resume", "jobs/alpha", "sweeps/grid").returncode == 0
    assert "suspend: false" in (jobs / "grid.yaml").read_text()
    assert ctl(home, "set", "priority", "job/beta", "7").stdout == "job/beta priority set to 7\n"
    assert "priority: 7" in (jobs / "beta.yaml").read_text()
    assert ctl(home, "patch", "job/beta", "-p", '{"spec": {"priority": 8}}').stdout == "job/beta patched\n"
    assert ctl(home, "cancel", "job/alpha", "job/beta").stdout.splitlines() == [
        "job/alpha cancelled",
        "job/beta cancelled",
    ]
    gone = ctl(home, "delete", "job/alpha", "sweep/grid", "job/ghost")
    assert gone.returncode == 1
    assert gone.stdout.splitlines() == ["job/alpha deleted", "sweep/grid deleted"]
    assert gone.stderr == "error: job/ghost not found\n"
    assert sorted(p.name for p in jobs.iterdir()) == ["beta.yaml"]
    wait_for(
        lambda: "grid-0" not in (ctl(home, "get", "jobs", "-o", "name").stdout), message="the sweep's children gone"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["logs", "job/a", "b"],
            "error: logs prints one job's output, not 2 (job/a job/b); run it once per job, e.g. xargs -n1\n",
        ),
        (
            ["logs", "sweep/s"],
            "error: logs prints one job's output; sweep/s is a sweep: its jobs are listed by gflowctl describe sweep/s\n",
        ),
        (
            ["describe", "pod/x", "job/"],
            "error: 'pod/x': unknown resource type 'pod'; use job/NAME, sweep/NAME or reservation/NAME; 'job/': use job/NAME\n",
        ),
        (["describe", "job/a", "b"], "error: 'b': give a type, as the other names do (job/a)\n"),
        (["describe", "job"], "error: name what to describe: gflowctl describe job NAME...\n"),
        (
            ["describe", "pods", "x"],
            "error: unknown resource type 'pods'; use job, sweep or reservation (or TYPE/NAME)\n",
        ),
        (["get", "jobs", "sweep/grid"], "error: get jobs lists jobs, not sweep/grid; use get sweeps\n"),
        (
            ["get", "job/a", "sweep/grid"],
            "error: get lists one type at a time: sweep/grid are sweeps; use get sweeps\n",
        ),
        (["patch", "sweep/grid", "-p", "{}"], "error: 'sweep/grid': this verb takes jobs, not sweeps\n"),
    ],
)
def test_a_bad_name_is_one_clear_line(home, argv, message):
    result = ctl(home, *argv)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", message)


def test_describe_of_several_names_those_not_found_and_shows_the_rest(home, finished):
    result = ctl(home, "describe", "job", "alpha", "nope", "beta")
    assert result.returncode == 1
    assert result.stderr == "error: job/nope not found\n"
    assert [b.splitlines()[0].split() for b in result.stdout.split("\n\n")] == [["Name:", "alpha"], ["Name:", "beta"]]


def _status_documents(home: Path, names: list[str]) -> list[dict]:
    """What ``get -o json`` prints (docs/cheatsheet.md "Objects you can apply again"), built here
    from the files: the manifest's document with the user each job runs as, and the status file's
    ``status`` (a Sweep's child: no spec of its own)."""
    from controller.util.yamlio import load_all, load_one

    objects = []
    for name in names:
        status = load_one((home / "status" / f"{name}.yaml").read_text())
        meta = status["metadata"]
        manifest = next(
            (
                d
                for d in load_all((home / status["status"]["manifest"]).read_text())
                if d["metadata"]["name"] == name and d.get("kind", "Job") + "Status" == status["kind"]
            ),
            None,
        )
        own = (manifest or {}).get("metadata", {})
        obj = {"apiVersion": status["apiVersion"], "kind": status["kind"].removesuffix("Status")}
        obj["metadata"] = {"name": name, "user": "root", "creationTimestamp": meta["creationTimestamp"]}
        for key, value in (
            ("labels", own.get("labels") if manifest else meta.get("labels")),
            ("annotations", own.get("annotations")),
        ):
            if value:
                obj["metadata"][key] = value
        if meta.get("ownerReferences"):
            obj["metadata"]["ownerReferences"] = meta["ownerReferences"]
        if manifest:
            obj["spec"] = manifest["spec"]
        objects.append({**obj, "status": status["status"]})
    return objects


def test_o_json_is_the_manifests_with_their_status_files_and_comes_from_gflowds_records_journal(home, finished):
    names = ["alpha", "beta", "grid-0", "grid-1"]
    out = ctl(home, "get", "jobs", "-o", "json").stdout
    expected = {"apiVersion": "v1", "kind": "List", "items": _status_documents(home, names)}
    assert out == json.dumps(expected, indent=2) + "\n"  # the same text the encoder would print
    assert ctl(home, "get", "job/beta", "-o", "json").stdout == json.dumps(expected["items"][1], indent=2) + "\n"
    sweeps = json.loads(ctl(home, "get", "sweeps", "-o", "json").stdout)
    assert sweeps["items"] == _status_documents(home, ["grid"])
    # served from run/records.journal and gflowctl's cache of the manifests it read above: no status
    # file or manifest parsed (the YAML reader is not even imported)
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, io; from controller.cli.main import main; sys.stdout = io.StringIO(); "
            "code = main(['get', 'jobs', '-o', 'json']); sys.stdout = sys.__stdout__; "
            "print(code, 'controller.util.yamlio' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "GFLOW_HOME": str(home)},
        timeout=60,
    )
    assert probe.stdout.split() == ["0", "False"], probe.stderr


def test_o_json_shows_the_status_file_when_its_journal_entry_is_stale(home, finished):
    """gflowd killed between writing a status file and its journal entry: the file is the truth."""
    finished.terminate()
    status = home / "status" / "alpha.yaml"
    changed = status.read_text().replace("attempt 1 exited with code 0", "edited behind the copy")
    staged = status.with_name(".alpha.tmp")
    staged.write_text(changed)
    os.replace(staged, status)  # as gflowd's atomic write does: a new inode
    items = json.loads(ctl(home, "get", "jobs", "-o", "json").stdout)["items"]
    assert items[0]["status"]["message"] == "edited behind the copy"
    assert items == _status_documents(home, ["alpha", "beta", "grid-0", "grid-1"])
    journal = home / "run" / "records.journal"
    journal.write_bytes(journal.read_bytes()[:-5])  # cut short: ignored too
    assert json.loads(ctl(home, "get", "jobs", "-o", "json").stdout)["items"] == items
    journal.write_bytes(b"")
    assert json.loads(ctl(home, "get", "jobs", "-o", "json").stdout)["items"] == items
