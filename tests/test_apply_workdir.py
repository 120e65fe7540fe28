"""The working-dir trap: a manifest applied from ``~/proj/job.yaml`` runs in ``~/proj``, as sbatch
would; one put into the spec dir by hand or by git keeps the rule of its own folder.

Real gflowctl and gflowd processes; what is checked is where the job really ran (its log)."""

from __future__ import annotations

import os

from helpers import ctl, read_log, wait_phase, write_manifest

from controller.util.yamlio import load_one

JOB = """\
# my training job
apiVersion: gflow.dev/v1alpha1
kind: Job
metadata:
  name: {name}
spec:
  command: [sh, -c, 'echo "in $PWD"; cat input.txt']   # relative to where I keep this file
{extra}"""


def test_apply_runs_a_manifest_where_the_user_keeps_it(home, gflowd, tmp_path):
    daemon = gflowd()
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    (proj / "input.txt").write_text("proj input\n")
    (proj / "data" / "input.txt").write_text("data input\n")
    (proj / "job.yaml").write_text(JOB.format(name="plain", extra=""))
    (proj / "dot.yaml").write_text(JOB.format(name="dot", extra="  workingDir: .\n"))
    (proj / "sub.yaml").write_text(JOB.format(name="sub", extra="  workingDir: data\n"))
    (proj / "abs.yaml").write_text(JOB.format(name="abs", extra=f"  workingDir: {proj / 'data'}\n"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    applied = ctl(
        home,
        "apply",
        "-f",
        str(proj / "job.yaml"),
        "-f",
        "../proj/dot.yaml",
        "-f",
        str(proj / "sub.yaml"),
        "-f",
        str(proj / "abs.yaml"),
        cwd=elsewhere,
    )
    assert applied.returncode == 0, applied.stderr
    piped = ctl(home, "apply", "-f", "-", cwd=proj, stdin=JOB.format(name="piped", extra=""))
    assert piped.returncode == 0, piped.stderr
    expected = {
        "plain": (proj, "proj"),
        "dot": (proj, "proj"),
        "sub": (proj / "data", "data"),
        "abs": (proj / "data", "data"),
        "piped": (proj, "proj"),
    }
    for name, (folder, which) in expected.items():
        wait_phase(home, name, ("Succeeded", "Failed"), daemon=daemon)
        assert read_log(home, name) == f"in {folder}\n{which} input\n", name

    # the stored copy keeps the user's text and says where it runs
    stored = (home / "jobs" / "plain.yaml").read_text()
    assert stored.startswith("# my training job\n") and "# relative to where I keep this file" in stored
    assert load_one(stored)["spec"]["workingDir"] == str(proj)
    assert (home / "jobs" / "abs.yaml").read_text() == (proj / "abs.yaml").read_text()  # nothing to add
    # applying the same file again changes nothing
    again = ctl(home, "apply", "-f", str(proj / "job.yaml"), cwd=elsewhere)
    assert again.stdout == "job/plain unchanged\n", again.stdout + again.stderr


def test_a_manifest_put_into_the_spec_dir_keeps_its_own_folder(home, gflowd):
    daemon = gflowd()
    folder = home / "jobs" / "team"
    folder.mkdir()
    (folder / "input.txt").write_text("team input\n")
    write_manifest(folder, "byhand.yaml", JOB.format(name="byhand", extra=""))
    wait_phase(home, "byhand", "Succeeded", daemon=daemon)
    assert read_log(home, "byhand") == f"in {folder}\nteam input\n"
    assert "workingDir" not in (folder / "byhand.yaml").read_text()


def test_a_sweep_applied_from_a_folder_gets_it_in_its_template(home, tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "sweep.yaml").write_text(
        "kind: Sweep\nmetadata: {name: lr}\nspec:\n  matrix: {lr: ['0.1']}\n  template:\n    command: [python3, t.py]\n    workingDir: out\n"
    )
    applied = ctl(home, "apply", "-f", "proj/sweep.yaml", cwd=tmp_path)
    assert applied.stdout == "sweep/lr created\n", applied.stderr
    stored = load_one((home / "jobs" / "lr.yaml").read_text())
    assert stored["spec"]["template"]["workingDir"] == str(proj / "out")


PLACED = {  # texts place_working_dir finds the line for without ruamel, and texts it leaves to ruamel
    "plain": "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: a\nspec:\n  command: ['true']\n",
    "comments and blanks": "# top\nkind: Job\nmetadata: {name: a}\nspec:   # the job\n\n  # what runs\n    # odd\n  command: [x]  # c\n",
    "a mapping first, deeper": "kind: Job\nspec:\n    resources:\n      gpus: 1\n    command: [x]\nmetadata:\n  name: b\n",
    "a quoted key": 'kind: Job\nmetadata: {name: a}\nspec:\n  "command": [x]\n',
    "no final newline": "kind: Job\nmetadata: {name: a}\nspec:\n  command: [x]",
    "non-ASCII": "kind: Job\nmetadata: {name: a, labels: {who: 'Zoë'}}\nspec:\n  command: [echo, \"naïve\"]\n",
    "a block scalar that says spec:": "kind: Job\nmetadata: {name: a}\nspec:\n  script: |\n    spec:\n    echo hi\n",
    "flow style": "kind: Job\nmetadata: {name: a}\nspec: {command: [x]}\n",
    "CRLF": "kind: Job\r\nmetadata: {name: a}\r\nspec:\r\n  command: [x]\r\n",
    "a relative workingDir": "kind: Job\nmetadata: {name: a}\nspec:\n  workingDir: sub\n  command: [x]\n",
    "an empty workingDir": "kind: Job\nmetadata: {name: a}\nspec:\n  workingDir:\n  command: [x]\n",
    "spec twice": "kind: Job\nmetadata: {name: a}\nspec:\n  command: [x]\nspec:\n  command: [y]\n",
}


def test_working_dir_placed_in_the_text_as_ruamels_edit_places_it():
    """gflowd's review places ``workingDir`` for every file of ``apply -f DIR``: found in the text
    (no round-trip load), the stored text is byte for byte what ``set_field`` wrote before."""
    from controller.util.manifest_edit import place_working_dir, set_field
    from controller.util.yamlio import YAMLSyntaxError

    for label, text in PLACED.items():
        try:
            data = load_one(text)
        except YAMLSyntaxError:
            continue
        current = data["spec"].get("workingDir") if isinstance(data["spec"], dict) else None
        expected = set_field(text, 0, ("spec", "workingDir"), os.path.normpath(os.path.join("/p", current or ".")))
        assert place_working_dir("job", data, text, "/p") == expected, label


def test_a_plain_manifest_is_placed_without_ruamel(monkeypatch):
    """The round-trip load (~1 ms a document) is not what a plain manifest's placement costs."""
    from controller.util import manifest_edit

    def no_round_trip(*_args):
        raise AssertionError("set_field called")

    monkeypatch.setattr(manifest_edit, "set_field", no_round_trip)
    text = PLACED["comments and blanks"]
    placed = manifest_edit.place_working_dir("job", load_one(text), text, "/home/u/proj")
    assert placed is not None and '\n  workingDir: "/home/u/proj"\n  command: [x]  # c\n' in placed
