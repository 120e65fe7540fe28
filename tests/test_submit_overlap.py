"""run and apply write a new manifest's hidden temp while gflowd reviews it (``EarlyManifest``):
what lands is only ever what gflowd passed, the temp is what is put in place when the verdict
stores that very text, and nothing is left behind otherwise (docs/performance.md, issue 36)."""

from __future__ import annotations

import os
import shutil

import pytest
from test_cli_e2e import ctl

from controller.client.write.manifests import EarlyManifest, check_inputs, likely_stored, store_document
from controller.paths import Home

PLAIN = "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {name: early}\nspec:\n  command: [sleep, '300']\n"
needs_no_conda = pytest.mark.skipif(shutil.which("conda") is not None, reason="conda is installed here")


@needs_no_conda
def test_a_submission_gflowd_refuses_leaves_nothing_in_the_spec_dir(home, gflowd, tmp_path):
    """gflowd refuses a condaEnv (no conda on its PATH) after the temp was written: it is removed."""
    gflowd()
    src = tmp_path / "proj" / "needs-conda.yaml"
    src.parent.mkdir()
    src.write_text(PLAIN.replace("{name: early}", "{name: needs-conda}") + "  condaEnv: torch\n")
    applied = ctl(home, "apply", "-f", str(src))
    ran = ctl(home, "run", "--name", "conda-run", "--conda-env", "torch", "--", "python", "train.py")
    for out in (applied, ran):
        assert out.returncode == 1 and "conda is not installed here" in out.stderr, out.stderr
    assert os.listdir(home / "jobs") == []  # neither manifest nor hidden temp


def test_the_temp_written_during_the_review_is_the_file_put_in_place(home, gflowd, tmp_path):
    gflowd()
    h = Home.resolve(str(home), None)
    early = EarlyManifest(h, "early", PLAIN, "<stdin>")
    [(docs, errors)] = check_inputs(h, [("<stdin>", PLAIN)], early=early)
    assert errors == [] and early.file is not None and early.file.tmp is not None
    written = os.stat(early.file.tmp).st_ino
    assert store_document(h, docs[0], False, early=early) == "created"
    stored = home / "jobs" / "early.yaml"
    assert os.stat(stored).st_ino == written and stored.read_text() == PLAIN
    assert os.listdir(home / "jobs") == ["early.yaml"]


def test_apply_guesses_the_working_dir_line_gflowd_inserts(home, gflowd, tmp_path):
    """The guess for a plain manifest applied from a project folder is gflowd's placed text, byte
    for byte: else every such apply would write its temp twice."""
    gflowd()
    h = Home.resolve(str(home), None)
    folder = str(tmp_path / "my proj")
    for text in (PLAIN, PLAIN.replace("{name: early}", "\n  name: early  # mine\n  labels: {a: b}")):
        guess = likely_stored(os.path.join(folder, "other.yaml"), text, folder)
        assert guess is not None
        [(docs, errors)] = check_inputs(h, [(os.path.join(folder, "other.yaml"), text)], folders=[folder])
        assert errors == [] and docs[0].placed, errors
        assert (guess[0], guess[1]) == (docs[0].name, docs[0].text)


def test_a_wrong_guess_stores_the_verdicts_text_and_leaves_no_temp(home, gflowd, tmp_path):
    gflowd()
    h = Home.resolve(str(home), None)
    early = EarlyManifest(h, "early", PLAIN.replace("300", "301"), "<stdin>")  # not what is checked
    [(docs, errors)] = check_inputs(h, [("<stdin>", PLAIN)], early=early)
    assert errors == [] and early.file is not None
    assert store_document(h, docs[0], False, early=early) == "created"
    assert (home / "jobs" / "early.yaml").read_text() == PLAIN
    assert os.listdir(home / "jobs") == ["early.yaml"]


def test_a_folder_apply_fsyncs_each_file_then_the_spec_dir_once_before_reporting_any(home, tmp_path, monkeypatch):
    """apply -f DIR: each new file fsynced before its rename, the spec dir once for all of them
    (not once per file), and no file reported created before that folder fsync; the outcomes in
    order, the same as one by one."""
    import stat

    from controller.client.write.manifests import apply_inputs, read_inputs

    src = tmp_path / "burst"
    src.mkdir()
    names = [f"burst-{i}" for i in range(5)]
    for name in names:
        (src / f"{name}.yaml").write_text(PLAIN.replace("{name: early}", f"{{name: {name}}}"))
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        real_fsync(fd)
        synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")

    monkeypatch.setattr(os, "fsync", spy)
    reported = [
        (outcome.name, outcome.verb, list(synced))
        for outcome in apply_inputs(Home.resolve(home), read_inputs([str(src)], False), False)
    ]
    assert [(name, verb) for name, verb, _ in reported] == [(name, "created") for name in names]
    assert synced == ["file"] * 5 + ["folder"]
    assert all(seen == synced for _, _, seen in reported)  # each printed after the folder's fsync
    assert sorted(os.listdir(home / "jobs")) == [f"{name}.yaml" for name in names]


def test_a_folder_apply_writes_every_new_file_during_the_review_then_only_renames(home, gflowd, tmp_path, monkeypatch):
    """apply -f DIR with gflowd running: every new file is written and fsynced while gflowd reviews
    them all, so after its answer the files land back to back (only renames left), not one write and
    fsync apart; each file still fsynced before its rename, the folder once before any is reported."""
    import stat

    from controller.client.write.manifests import apply_inputs, read_inputs
    from controller.util import fsutil

    gflowd()
    src = tmp_path / "burst"
    src.mkdir()
    names = [f"burst-{i}" for i in range(5)]
    for name in names:
        (src / f"{name}.yaml").write_text(PLAIN.replace("{name: early}", f"{{name: {name}}}"))
    src.joinpath("other.yaml").write_text(PLAIN.replace("{name: early}", "{name: burst-4}"))  # defined twice
    steps: list[str] = []
    real_fsync, real_rename = os.fsync, fsutil._rename_noreplace

    def fsync(fd: int) -> None:
        real_fsync(fd)
        steps.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")

    def rename(tmp: str, path) -> None:
        real_rename(tmp, path)
        steps.append("rename")

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(fsutil, "_rename_noreplace", rename)
    reported = list(apply_inputs(Home.resolve(home), read_inputs([str(src)], False), False))
    assert [(o.name, o.verb) for o in reported[:5]] == [(name, "created") for name in names]
    assert reported[5:] == [f"job/burst-4 is defined twice: in {src / 'burst-4.yaml'} and {src / 'other.yaml'}"]
    assert steps == ["file"] * 5 + ["rename"] * 5 + ["folder"]
    assert sorted(os.listdir(home / "jobs")) == [f"{name}.yaml" for name in names]  # no temp left
