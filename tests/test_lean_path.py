"""LeanPath (util/lean_path.py) does what pathlib.Path does for the operations run and apply use,
on a table of spellings; what pathlib would spell otherwise is a real Path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.paths import Home
from controller.util.lean_path import LeanPath, is_plain, lean

TEXTS = ["/", "/srv", "/srv/gflow/jobs/a.yaml", "rel", "rel/x.tar.gz", "a.", ".env", "/x/.a.yaml.tmp"]


@pytest.mark.parametrize("text", TEXTS)
def test_a_plain_path_reads_as_pathlib_reads_it(text):
    mine, real = lean(text), Path(text)
    assert isinstance(mine, LeanPath) and str(mine) == str(real) == os.fspath(mine)
    assert (mine.name, mine.stem, mine.suffix, mine.is_absolute()) == (
        real.name,
        real.stem,
        real.suffix,
        real.is_absolute(),
    )
    assert str(mine.parent) == str(real.parent) and str(mine.absolute()) == str(real.absolute())
    for other in ("b", "b/c.yaml", "/abs", "b/", "./b", "../b"):
        assert str(mine / other) == str(real / other), other
    assert str(mine.with_suffix(".yml") if real.name else mine) == str(real.with_suffix(".yml") if real.name else real)


def test_it_equals_and_orders_only_lean_paths():
    assert sorted([lean("/b"), lean("/a")]) == [lean("/a"), lean("/b")] and len({lean("/a"), lean("/a")}) == 1
    assert lean("/a") != Path("/a") and lean("/a") != "/a"
    with pytest.raises(TypeError):
        sorted([lean("/b"), Path("/a")])


@pytest.mark.parametrize("text", ["//srv", "/srv/", "/srv/./x", "/srv/../x", "./rel", "", ".", "rel//x"])
def test_what_pathlib_spells_otherwise_is_a_real_path(text):
    assert not is_plain(text)
    if text:
        assert type(lean(text)) is type(Path(text)) and lean(text) == Path(text)


def test_files_and_folders_as_pathlib(tmp_path):
    base = lean(str(tmp_path))
    (base / "a" / "b").mkdir(parents=True)
    (base / "a" / "b").mkdir(exist_ok=True)
    with pytest.raises(FileExistsError):
        (base / "a").mkdir()
    with pytest.raises(FileNotFoundError):
        (base / "x" / "y").mkdir()
    (tmp_path / "f.txt").write_text("hi")
    f = base / "f.txt"
    assert (f.exists(), f.is_file(), f.is_dir(), f.read_text(), f.read_bytes()) == (True, True, False, "hi", b"hi")
    assert (base / "a").is_dir() and not (base / "nope").exists() and not (base / "f.txt" / "under").exists()
    assert f.stat().st_size == 2
    f.unlink()
    f.unlink(missing_ok=True)
    with pytest.raises(FileNotFoundError):
        f.unlink()
    assert sorted(p.name for p in base.iterdir()) == ["a"]  # anything else: a real Path's


def test_a_lean_home_is_the_home_locate_finds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GFLOW_HOME", str(tmp_path / "h"))
    for home, spec in ((None, None), ("rel", None), (None, "specs"), (str(tmp_path / "h"), "~/x"), ("h/", None)):
        usual, mine = Home.locate(home, spec), Home.locate_lean(home, spec)
        assert (str(mine.root), str(mine.spec_dir)) == (str(usual.root), str(usual.spec_dir)), (home, spec)
        assert str(mine.status_file("a")) == str(usual.status_file("a"))
        assert mine.display(mine.spec_dir / "a.yaml") == usual.display(usual.spec_dir / "a.yaml")
    (tmp_path / "h" / "run").mkdir(parents=True)
    (tmp_path / "h" / "run" / "spec-dir").write_text("/srv/checkout/jobs\n")
    assert str(Home.locate_lean().spec_dir) == str(Home.locate().spec_dir) == "/srv/checkout/jobs"
    assert isinstance(Home.locate_lean().spec_dir, LeanPath) and isinstance(Home.locate_lean("h/").root, Path)
