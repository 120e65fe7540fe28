"""``gflowctl get jobs``' quick path (controller/cli/get_table.py): the table from gflowd's jobs
table without a ``Home``, so without pathlib; the same bytes as the usual path, which it leaves
every case it cannot answer the same way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import gflowctl_imports
from test_get_prepared import JOBS, _no_age, _settled_home, ctl

from controller.paths import Home, plain_home

QUICK = [
    ("get", "jobs"),
    ("get", "jobs", "-A"),
    ("get", "jobs", "-A", "-o", "name"),
    ("get", "job", "runs", "held", "gone"),
    ("get", "jobs", "gone"),
    ("get", "j", "done"),
]


@pytest.mark.e2e
def test_the_quick_path_prints_what_the_usual_one_does_and_loads_no_pathlib(home, gflowd, fake_gpus):
    _settled_home(home, gflowd, fake_gpus)
    for argv in QUICK:
        quick = ctl(home, *argv)
        # the home spelled with a trailing slash: not plain, so the usual path (Home) answers
        usual = ctl(home, "--home", f"{home}/", *argv)
        assert (quick.returncode, quick.stderr) == (usual.returncode, usual.stderr), argv
        assert _no_age(quick.stdout) == _no_age(usual.stdout), argv
        env = {**os.environ, "GFLOW_HOME": str(home)}
        loaded, probe = gflowctl_imports(list(argv), ("pathlib", "controller.cli.common"), env)
        if loaded[0] == "0":  # a name not found is worded by cli/common.py, which loads Home
            assert loaded[1:] == [], (argv, loaded, probe.stderr)
    assert "warning: gflowd is not running" in quick.stderr
    # what it cannot answer alone goes the usual way (cli/common.py's Home, so pathlib)
    env = {**os.environ, "GFLOW_HOME": str(home)}
    loaded, _ = gflowctl_imports(["get", "jobs", "-l", "team=nlp"], ("controller.cli.common",), env)
    assert loaded[1:] == ["controller.cli.common"]


@pytest.mark.parametrize(
    "given",
    ["/srv/gflow", "/srv/gflow/", "/srv//gflow", "/srv/./gflow", "/srv/x/../gflow", "rel", "./rel", "~", "~/g", "."],
)
def test_a_plain_root_is_the_one_home_resolves_else_none(given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = plain_home(given)
    assert root is None or root == str(Home.resolve(given).root), (given, root)
    if given in ("/srv/gflow", "rel", "~/g"):
        assert root is not None


def test_without_home_the_root_follows_gflow_home_then_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("GFLOW_HOME", str(tmp_path / "h"))
    assert plain_home(None) == str(Home.resolve().root) == str(tmp_path / "h")
    monkeypatch.setenv("GFLOW_HOME", "")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert plain_home(None) == str(Home.resolve().root) == str(tmp_path / "data" / "gflow")
    monkeypatch.delenv("XDG_DATA_HOME")
    assert plain_home(None) == str(Home.resolve().root)


def _json(home, cache, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "get", "jobs", "-o", "json", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "GFLOW_HOME": str(home), "GFLOW_CACHE_DIR": str(cache)},
        timeout=60,
    )


@pytest.mark.e2e
def test_json_texts_kept_from_the_last_listing_follow_their_status_and_manifest(home, gflowd, fake_gpus, tmp_path):
    """A listing prints the texts it kept (client/read/object_texts.py) only while the status file
    and the manifest they were made from are unchanged: each edit shows at once, as without them."""
    _settled_home(home, gflowd, fake_gpus)
    kept, fresh = tmp_path / "kept", tmp_path / "fresh"

    def listings_agree() -> str:
        shutil.rmtree(fresh, ignore_errors=True)
        with_kept, without = _json(home, kept), _json(home, fresh)
        assert with_kept.returncode == without.returncode == 0, with_kept.stderr
        assert with_kept.stdout == without.stdout
        return with_kept.stdout

    first = listings_agree()
    assert len(json.loads(first)["items"]) == len(
        JOBS
    )  # every byte out before the process ended (cli/main.py _exit_now)
    gone = ctl(home, "get", "jobs", "gone")
    assert (gone.returncode, gone.stderr.splitlines()[-1]) == (1, "error: job/gone not found")
    assert list(kept.glob("objects-*.marshal")), "the listing kept its texts"
    assert listings_agree() == first
    manifest = home / "jobs" / "done.yaml"
    manifest.write_text(manifest.read_text().replace("team: vision", "team: edited"))  # the spec's file
    assert '"team": "edited"' in listings_agree()
    status = home / "status" / "broke.yaml"
    text = status.read_text()
    assert "exitCode: 3" in text
    temp = status.with_name(".broke.yaml.tmp")
    temp.write_text(text.replace("exitCode: 3", "exitCode: 4"))
    temp.replace(status)  # as gflowd writes a status: a new file renamed into place
    assert '"exitCode": 4' in listings_agree()
    manifest.unlink()  # no file: no spec
    assert '"team": "edited"' not in listings_agree()
