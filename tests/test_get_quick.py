"""``gflowctl get jobs``' quick path (controller/cli/get_table.py): the table from gflowd's jobs
table without a ``Home``, so without pathlib; the same bytes as the usual path, which it leaves
every case it cannot answer the same way."""

from __future__ import annotations

import os

import pytest
from helpers import gflowctl_imports
from test_get_prepared import _no_age, _settled_home, ctl

from controller.cli.get_table import plain_root
from controller.paths import Home

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
        loaded, probe = gflowctl_imports(list(argv), ("pathlib", "controller.paths"), env)
        if loaded[0] == "0":  # a name not found is worded by cli/common.py, which loads Home
            assert loaded[1:] == [], (argv, loaded, probe.stderr)
    assert "warning: gflowd is not running" in quick.stderr
    # what it cannot answer alone goes the usual way (Home, so pathlib)
    env = {**os.environ, "GFLOW_HOME": str(home)}
    loaded, _ = gflowctl_imports(["get", "jobs", "-l", "team=nlp"], ("controller.paths",), env)
    assert loaded[1:] == ["controller.paths"]


@pytest.mark.parametrize(
    "given",
    ["/srv/gflow", "/srv/gflow/", "/srv//gflow", "/srv/./gflow", "/srv/x/../gflow", "rel", "./rel", "~", "~/g", "."],
)
def test_a_plain_root_is_the_one_home_resolves_else_none(given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = plain_root(given)
    assert root is None or root == str(Home.resolve(given).root), (given, root)
    if given in ("/srv/gflow", "rel", "~/g"):
        assert root is not None


def test_without_home_the_root_follows_gflow_home_then_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("GFLOW_HOME", str(tmp_path / "h"))
    assert plain_root(None) == str(Home.resolve().root) == str(tmp_path / "h")
    monkeypatch.setenv("GFLOW_HOME", "")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert plain_root(None) == str(Home.resolve().root) == str(tmp_path / "data" / "gflow")
    monkeypatch.delenv("XDG_DATA_HOME")
    assert plain_root(None) == str(Home.resolve().root)
