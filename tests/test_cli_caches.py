"""gflowctl's own caches stay bounded: the texts ``get jobs -o json`` kept (objects-*.marshal) and the
manifests it parsed (manifests-*.marshal), under ``$GFLOW_CACHE_DIR`` (else ``$XDG_CACHE_HOME/gflow``,
``~/.cache/gflow``): entries of jobs and manifests that are gone drop out when a cache is rewritten,
a rewrite keeps at most ``CACHE_KEEP_BYTES``, and the files of homes that are gone (unused 30 days)
are removed. The folder is 0700 and the files 0600: a user's cache is no one else's to read."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import wait_for
from test_get_prepared import JOBS, _settled_home, ctl

from controller.client.read import specs
from controller.client.read.object_texts import FORMAT
from controller.client.read.specs import CACHE_FORMAT, _load_cache, _save_cache
from controller.client.write.submit import _memory_file, remember
from controller.paths import Home

NOBODY = 65534


def _listed_as_json(home: Path, caches: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "get", "jobs", "-A", "-o", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "GFLOW_HOME": str(home), "GFLOW_CACHE_DIR": str(caches)},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [item["metadata"]["name"] for item in json.loads(done.stdout)["items"]]


def _kept(caches: Path) -> set[str]:
    (objects,) = caches.glob("objects-*.marshal")
    return set(_load_cache(str(objects), FORMAT))


@pytest.mark.e2e
def test_the_texts_of_deleted_jobs_drop_out_at_the_next_get_json(home, gflowd, fake_gpus, tmp_path):
    _settled_home(home, gflowd, fake_gpus)
    caches = tmp_path / "caches"  # made by gflowctl: 0700, its files 0600
    assert sorted(_listed_as_json(home, caches)) == sorted(JOBS)
    assert _kept(caches) == set(JOBS)
    assert stat.S_IMODE(caches.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in caches.iterdir()} == {0o600}

    daemon = gflowd("--fake-gpus", fake_gpus)
    for name in ("done", "broke"):
        (home / "jobs" / f"{name}.yaml").unlink()  # deleted: gflowd forgets the jobs
    left = sorted(set(JOBS) - {"done", "broke"})
    wait_for(
        lambda: sorted(ctl(home, "get", "jobs", "-A", "-o", "name").stdout.split()) == [f"job/{n}" for n in left],
        timeout=30,
        message="gflowd to forget the deleted jobs",
    )
    daemon.terminate()
    assert sorted(_listed_as_json(home, caches)) == left
    assert _kept(caches) == set(left)


def test_a_rewrite_over_the_cap_keeps_only_what_the_listing_used(tmp_path, monkeypatch):
    monkeypatch.setattr(specs, "CACHE_KEEP_BYTES", 10_000)
    path = str(tmp_path / "caches" / "objects-0123.marshal")
    everything = {f"job-{n}": f"{n:03d}" * 30 for n in range(200)}  # ~20 kB
    used = {name: everything[name] for name in ("job-1", "job-2")}
    _save_cache(path, everything, FORMAT, fewer=used)
    assert _load_cache(path, FORMAT) == used
    _save_cache(path, everything, FORMAT, fewer=everything)  # what was used is over the cap too: nothing
    assert _load_cache(path, FORMAT) == {} and os.path.getsize(path) < 100


def test_a_few_names_keep_the_other_manifests_but_not_those_deleted(tmp_path, monkeypatch):
    caches = tmp_path / "caches"
    monkeypatch.setenv("GFLOW_CACHE_DIR", str(caches))
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    for name in ("a", "b", "c"):
        (home.spec_dir / f"{name}.yaml").write_text(f"metadata: {{name: {name}}}\nspec: {{command: [x]}}\n")
    specs.manifest_documents(home, {name: f"jobs/{name}.yaml" for name in ("a", "b", "c")})
    (home.spec_dir / "c.yaml").unlink()
    (home.spec_dir / "a.yaml").write_text("metadata: {name: a}\nspec: {command: [y]}\n")  # read again: a rewrite
    assert specs.manifest_documents(home, {"a": "jobs/a.yaml"})["a"][0]["spec"] == {"command": ["y"]}
    (manifests,) = caches.glob("manifests-*.marshal")
    assert sorted(os.path.basename(p) for p in _load_cache(str(manifests), CACHE_FORMAT)) == ["a.yaml", "b.yaml"]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to nobody needs root")
def test_cache_files_unused_for_30_days_are_removed_when_a_cache_is_written(tmp_path):
    caches = tmp_path / "caches"
    caches.mkdir(mode=0o700)
    month = time.time() - 31 * 86400
    for name in ("objects-gonehome.marshal", "manifests-gonehome.marshal", "objects-x.marshal.123.tmp", "notes"):
        (caches / name).write_text("")
        os.utime(caches / name, (month, month))
    (caches / "objects-usedhome.marshal").write_text("")
    (caches / "objects-nobodys.marshal").write_text("")  # in a folder shared by mistake: not the caller's
    os.chown(caches / "objects-nobodys.marshal", NOBODY, NOBODY)
    os.utime(caches / "objects-nobodys.marshal", (month, month))
    _save_cache(str(caches / "manifests-thishome.marshal"), {}, CACHE_FORMAT)
    left = ["manifests-thishome.marshal", "notes", "objects-nobodys.marshal", "objects-usedhome.marshal"]
    assert sorted(os.listdir(caches)) == left


def test_the_last_job_remembered_forgets_homes_that_are_gone(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    here = Home.resolve(tmp_path / "here")
    here.ensure()
    _memory_file().parent.mkdir(parents=True)
    _memory_file().write_text(json.dumps({str(tmp_path / "gone"): "old-job", str(here.root): "x"}))
    assert remember(here, "train-1") is None
    assert json.loads(_memory_file().read_text()) == {str(here.root): "train-1"}
