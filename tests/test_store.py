"""The manifest store on real temporary spec directories: what is read, what is ignored, what is cached."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.api.validation import MAX_MANIFEST_BYTES
from controller.model.documents import AdmittedJob, Rejection, model_built
from controller.observe.manifests import ManifestStore, is_manifest_name
from controller.paths import Home

JOB = "spec:\n  command: [echo, hi]\n"


# --- builders --------------------------------------------------------------------------------------


class SpecDir:
    """A spec directory under a temporary GFLOW_HOME, and a store watching it."""

    def __init__(self, root: Path):
        self.home = Home.resolve(root / "home")
        self.dir = self.home.spec_dir
        self.dir.mkdir(parents=True)
        self.store = ManifestStore(self.dir, self.home.display)

    def path(self, rel: str) -> Path:
        return self.dir / rel

    def write(self, rel: str, content: str | bytes = JOB) -> Path:
        path = self.path(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return path

    def touch(self, rel: str, seconds_later: int = 10) -> None:
        """Move the mtime forward explicitly: no sleeping for the clock to tick."""
        st = os.stat(self.path(rel))
        os.utime(self.path(rel), ns=(st.st_atime_ns, st.st_mtime_ns + seconds_later * 10**9))

    def docs(self) -> dict[str, AdmittedJob | Rejection]:
        out = {}
        for doc in self.store.documents():
            if isinstance(doc, Rejection) and doc.reason == "Ignored":
                continue  # entries not read (FIFOs, symlinks leaving): see the tests that look for them
            assert doc.name not in out, f"{doc.name} seen twice: {doc.source} and {out[doc.name].source}"
            out[doc.name] = doc
        return out

    def sources(self) -> list[str]:
        return sorted(doc.source for doc in self.store.documents())


@pytest.fixture
def spec(tmp_path: Path) -> SpecDir:
    return SpecDir(tmp_path)


# --- what is a manifest ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "is_manifest"),
    [
        ("a.yaml", True),
        ("a.yml", True),
        ("train-7.yaml", True),
        ("a.YAML", False),
        (".a.yaml", False),
        ("a.yaml~", False),
        (".#a.yaml", False),
        (".a.yaml.swp", False),
        ("#a.yaml#", False),
        ("a.json", False),
        ("a.txt", False),
        ("yaml", False),
    ],
)
def test_is_manifest_name(filename, is_manifest):
    assert is_manifest_name(filename) is is_manifest


# --- scanning --------------------------------------------------------------------------------------


def test_scan_is_recursive_and_names_sources_relative_to_home(spec):
    paths = {spec.write("a.yaml"), spec.write("team/b.yml"), spec.write("team/deeper/c.yaml")}
    changed = spec.store.scan()
    assert changed == {str(p) for p in paths}
    docs = spec.docs()
    assert sorted(docs) == ["a", "b", "c"]
    assert docs["b"].source == "jobs/team/b.yml"
    assert docs["c"].source == "jobs/team/deeper/c.yaml"
    assert all(isinstance(d, AdmittedJob) for d in docs.values())


def test_multi_document_file(spec):
    spec.write(
        "many.yaml",
        "metadata: {name: one}\nspec: {command: [a]}\n---\nmetadata: {name: two}\nspec: {command: [b]}\n---\n",
    )
    spec.store.scan()
    docs = spec.docs()
    assert sorted(docs) == ["one", "two"]
    assert (docs["one"].doc_index, docs["two"].doc_index) == (0, 1)
    assert {d.source for d in docs.values()} == {"jobs/many.yaml"}


def test_leading_separator_and_empty_documents_keep_a_single_document_file_single(spec):
    spec.write("solo.yaml", "---\n" + JOB + "---\n")
    spec.store.scan()
    assert sorted(spec.docs()) == ["solo"]  # one real document: the stem names it


@pytest.mark.parametrize(
    "rel",
    [
        ".hidden.yaml",
        "backup.yaml~",
        ".#locked.yaml",
        ".swapped.yaml.swp",
        "#autosave.yaml#",
        ".git/in-git.yaml",
        ".github/workflows/ci.yml",
        "sub/.cache/deep.yaml",
        "notes.txt",
        "job.json",
        "README.md",
    ],
)
def test_hidden_swap_backup_and_non_yaml_files_are_ignored(spec, rel):
    spec.write("real.yaml")
    spec.write(rel)
    changed = spec.store.scan()
    assert changed == {str(spec.path("real.yaml"))}
    assert sorted(spec.docs()) == ["real"]
    # an editor event for that file changes nothing either
    assert spec.store.refresh([str(spec.path(rel))]) == set()
    assert sorted(spec.docs()) == ["real"]


def test_empty_file_is_nothing(spec):
    spec.write("empty.yaml", "")
    spec.write("comment.yaml", "# nothing yet\n")
    spec.store.scan()
    assert spec.store.documents() == []


# --- the parse cache -------------------------------------------------------------------------------


def test_rescan_without_changes_parses_nothing(spec):
    for i in range(5):
        spec.write(f"j{i}.yaml")
    spec.store.scan()
    assert spec.store.parses == 5
    assert spec.store.scan() == set()
    assert spec.store.scan() == set()
    assert spec.store.parses == 5


def test_touch_with_a_new_mtime_reparses_only_that_file(spec):
    spec.write("a.yaml")
    spec.write("b.yaml")
    spec.store.scan()
    spec.touch("a.yaml")
    assert spec.store.scan() == {str(spec.path("a.yaml"))}
    assert spec.store.parses == 3


def test_edit_is_seen_on_rescan(spec):
    spec.write("a.yaml")
    spec.store.scan()
    spec.write("a.yaml", "spec:\n  command: [echo, changed, text]\n")
    spec.touch("a.yaml")
    spec.store.scan()
    assert spec.docs()["a"].spec.command == ["echo", "changed", "text"]


def test_replacing_a_file_atomically_is_seen(spec):
    """git and editors write a new file and rename it over the old one: a new inode."""
    spec.write("a.yaml")
    spec.store.scan()
    st = os.stat(spec.path("a.yaml"))
    tmp = spec.write(".a.yaml.tmp", JOB.replace("hi", "ho"))  # same size
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))  # even the same mtime
    os.replace(tmp, spec.path("a.yaml"))
    assert spec.store.scan() == {str(spec.path("a.yaml"))}
    assert spec.docs()["a"].spec.command == ["echo", "ho"]


# --- bad files -------------------------------------------------------------------------------------

BAD_FILES = [
    pytest.param(b"# " + b"x" * MAX_MANIFEST_BYTES + b"\n", "Invalid", "over the 1 MiB limit", id="oversized"),
    pytest.param(b"spec:\x00\x01\x02", "Invalid", "file is binary, not YAML text", id="binary"),
    pytest.param(
        b"spec:\n  command: [caf\xe9]\n", "Invalid", "file is not UTF-8 text (bad byte at offset 21)", id="latin-1"
    ),
    pytest.param(b"spec: {command: [a]\n", "YAMLError", "YAML syntax error: ", id="yaml-syntax"),
    pytest.param(b"spec:\n  command: [a]\n bad: indent\n", "YAMLError", "YAML syntax error: ", id="yaml-indent"),
]


@pytest.mark.parametrize(("content", "reason", "fragment"), BAD_FILES)
def test_bad_files_are_rejected_under_the_file_stem(spec, content, reason, fragment):
    spec.write("broken.yaml", content)
    spec.write("fine.yaml")
    spec.store.scan()
    docs = spec.docs()
    assert isinstance(docs["fine"], AdmittedJob)  # never touches other jobs
    bad = docs["broken"]
    assert isinstance(bad, Rejection)
    assert bad.reason == reason
    assert fragment in bad.message
    assert bad.source == "jobs/broken.yaml"
    assert "jobs/broken.yaml" in bad.message


def test_yaml_syntax_error_names_the_line(spec):
    spec.write("broken.yaml", "metadata:\n  name: x\nspec: {command: [a]\n")
    spec.store.scan()
    bad = spec.docs()["broken"]
    assert bad.message.endswith("(jobs/broken.yaml line 4)")


def test_oversized_file_is_not_read(spec):
    path = spec.write("big.yaml", "")
    with open(path, "wb") as handle:  # sparse: 2 MiB without writing 2 MiB
        handle.truncate(2 * MAX_MANIFEST_BYTES)
    spec.store.scan()
    bad = spec.docs()["big"]
    assert bad.message == f"file is {2 * MAX_MANIFEST_BYTES} bytes, over the 1 MiB limit for a manifest (jobs/big.yaml)"


def test_bad_file_with_an_invalid_stem_has_no_name(spec):
    spec.write("Bad_Name.yaml", b"\x00\x00")
    spec.store.scan()
    (bad,) = spec.store.documents()
    assert isinstance(bad, Rejection)
    assert bad.name is None


def test_unreadable_file_is_rejected(spec):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    path = spec.write("secret.yaml")
    path.chmod(0)
    try:
        spec.store.scan()
        bad = spec.docs()["secret"]
        assert isinstance(bad, Rejection) and "cannot read the file" in bad.message
    finally:
        path.chmod(0o644)


def test_fixed_file_is_admitted_again(spec):
    spec.write("a.yaml", "spec: {command: [a]\n")
    spec.store.scan()
    assert isinstance(spec.docs()["a"], Rejection)
    spec.write("a.yaml", JOB)
    spec.touch("a.yaml")
    spec.store.scan()
    assert isinstance(spec.docs()["a"], AdmittedJob)


# --- deletions -------------------------------------------------------------------------------------


def test_deleted_files_disappear_on_scan(spec):
    spec.write("a.yaml")
    spec.write("b.yaml")
    spec.store.scan()
    spec.path("a.yaml").unlink()
    assert spec.store.scan() == {str(spec.path("a.yaml"))}
    assert sorted(spec.docs()) == ["b"]


def test_deleted_file_disappears_on_refresh(spec):
    spec.write("a.yaml")
    spec.write("b.yaml")
    spec.store.scan()
    spec.path("a.yaml").unlink()
    assert spec.store.refresh([str(spec.path("a.yaml"))]) == {str(spec.path("a.yaml"))}
    assert sorted(spec.docs()) == ["b"]


TWO_JOBS = (
    "metadata: {name: first}\nspec:\n  command: [echo, 1]\n---\nmetadata: {name: second}\nspec:\n  command: [echo, 2]\n"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_jobs_missing_from_a_file_rewritten_in_place_count_only_after_the_grace(tmp_path):
    """Truncated (or half written) in place, a file reads with jobs missing for a moment: the store
    keeps what it held, asks to look again, and takes the file as it is once it stays so."""
    from controller.observe.manifests import SHRINK_GRACE

    spec = SpecDir(tmp_path)
    clock = Clock()
    spec.store = ManifestStore(spec.dir, spec.home.display, monotonic=clock)
    path = spec.write("two.yaml", TWO_JOBS)
    spec.store.scan()
    inode = path.stat().st_ino

    path.write_text(TWO_JOBS.split("---")[0])  # in place: the same inode, "second" not written yet
    assert path.stat().st_ino == inode
    assert spec.store.refresh([str(path)]) == set()
    assert sorted(spec.docs()) == ["first", "second"]
    assert spec.store.looks_again() and spec.store.look_again_at() == clock.now + SHRINK_GRACE

    clock.now += SHRINK_GRACE / 2
    path.write_text(TWO_JOBS)  # the rest lands: taken at once, nothing held any more
    spec.store.refresh([])
    assert sorted(spec.docs()) == ["first", "second"] and spec.store.look_again_at() is None

    path.write_text("")
    spec.store.refresh([str(path)])
    assert sorted(spec.docs()) == ["first", "second"]
    clock.now += SHRINK_GRACE - 0.01
    assert spec.store.refresh([]) == set() and sorted(spec.docs()) == ["first", "second"]
    clock.now += 0.01  # empty for the whole grace: it means it
    assert spec.store.refresh([]) == {str(path)}
    assert spec.docs() == {} and not spec.store.looks_again() and spec.store.look_again_at() is None


def test_a_file_rewritten_in_place_again_and_again_with_jobs_missing_counts_after_the_bound(tmp_path):
    """Each new text restarts the grace, but not for good: a script rewriting the file in place every
    second (jobs missing each time) has it taken as it reads once SHRINK_MAX has passed."""
    from controller.observe.manifests import SHRINK_GRACE, SHRINK_MAX

    spec = SpecDir(tmp_path)
    clock = Clock()
    spec.store = ManifestStore(spec.dir, spec.home.display, monotonic=clock)
    path = spec.write("two.yaml", TWO_JOBS)
    spec.store.scan()
    began = clock.now
    rewrites = 0
    while clock.now - began < SHRINK_MAX:
        rewrites += 1
        path.write_text(TWO_JOBS.split("---")[0] + f"# rewrite {rewrites}\n")
        assert spec.store.refresh([str(path)]) == set(), f"taken after {clock.now - began:.1f} s"
        assert spec.store.look_again_at() == min(clock.now + SHRINK_GRACE, began + SHRINK_MAX)
        clock.now += SHRINK_GRACE / 2
    assert spec.store.refresh([]) == {str(path)}
    assert sorted(spec.docs()) == ["first"] and spec.store.look_again_at() is None
    assert rewrites == int(SHRINK_MAX / (SHRINK_GRACE / 2))


def test_a_file_saved_whole_with_jobs_removed_counts_at_once(spec):
    """A temp file renamed over it (gflowctl, vim, git) is a new inode, complete when it appears."""
    path = spec.write("two.yaml", TWO_JOBS)
    spec.store.scan()
    spec.write(".two.yaml.tmp", TWO_JOBS.split("---")[1])
    os.rename(spec.path(".two.yaml.tmp"), path)
    assert spec.store.refresh([str(path)]) == {str(path)}
    assert sorted(spec.docs()) == ["second"] and spec.store.look_again_at() is None


def test_a_file_rewritten_in_place_with_the_same_jobs_or_more_counts_at_once(spec):
    path = spec.write("one.yaml", TWO_JOBS.split("---")[0])
    spec.store.scan()
    path.write_text(TWO_JOBS)
    assert spec.store.refresh([str(path)]) == {str(path)}
    assert sorted(spec.docs()) == ["first", "second"] and spec.store.look_again_at() is None


def test_deleted_folder_disappears_on_refresh(spec):
    spec.write("team/a.yaml")
    spec.write("team/sub/b.yaml")
    spec.write("c.yaml")
    spec.store.scan()
    for rel in ("team/sub/b.yaml", "team/a.yaml"):
        spec.path(rel).unlink()
    spec.path("team/sub").rmdir()
    spec.path("team").rmdir()
    assert spec.store.refresh([str(spec.path("team"))]) == {
        str(spec.path("team/a.yaml")),
        str(spec.path("team/sub/b.yaml")),
    }
    assert sorted(spec.docs()) == ["c"]


def test_renamed_to_a_backup_name_disappears(spec):
    spec.write("a.yaml")
    spec.store.scan()
    os.rename(spec.path("a.yaml"), spec.path("a.yaml~"))
    spec.store.refresh([str(spec.path("a.yaml")), str(spec.path("a.yaml~"))])
    assert spec.docs() == {}


# --- symlinks --------------------------------------------------------------------------------------


def test_symlinked_file_leaving_the_spec_dir_is_not_followed(spec, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.yaml").write_text(JOB)
    os.symlink(outside / "o.yaml", spec.path("link.yaml"))
    spec.write("a.yaml")
    spec.store.scan()
    assert sorted(spec.docs()) == ["a"]
    assert spec.store.refresh([str(spec.path("link.yaml"))]) == set()
    assert sorted(spec.docs()) == ["a"]
    # not followed, but reported: a nameless rejection, which admission turns into a Warning
    (ignored,) = [d for d in spec.store.documents() if d.name is None]
    assert (ignored.reason, ignored.source) == ("Ignored", "jobs/link.yaml")
    assert "symlink leading outside the spec directory: not followed" in ignored.message


def test_symlinked_folder_leaving_the_spec_dir_is_not_followed_by_scan(spec, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.yaml").write_text(JOB)
    os.symlink(outside, spec.path("linked"))
    spec.store.scan()
    assert spec.docs() == {}


def test_symlinked_folder_leaving_the_spec_dir_is_not_followed_by_refresh(spec, tmp_path):
    """The watcher reports the new link's path; refreshing it must not walk the target."""
    spec.store.scan()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.yaml").write_text(JOB)
    os.symlink(outside, spec.path("linked"))
    spec.store.refresh([str(spec.path("linked"))])
    assert spec.docs() == {}


def test_symlink_inside_the_spec_dir_is_followed(spec):
    spec.write("real/a.yaml")
    os.symlink(spec.path("real/a.yaml"), spec.path("alias.yaml"))
    spec.store.scan()
    assert sorted(spec.docs()) == ["a", "alias"]


def test_symlink_loop_inside_the_spec_dir_reads_each_manifest_once(spec):
    """``ln -s . jobs/loop`` must not make every manifest appear once per nesting level."""
    spec.write("a.yaml")
    os.symlink(".", spec.path("loop"))
    spec.store.scan()
    assert spec.sources() == ["jobs/a.yaml"]


# --- incremental refresh ---------------------------------------------------------------------------


def test_refresh_reads_only_the_given_paths(spec):
    spec.write("a.yaml")
    spec.store.scan()
    spec.write("b.yaml")
    spec.write("c.yaml")  # changed on disk but not reported: refresh does not look at it
    assert spec.store.refresh([str(spec.path("b.yaml"))]) == {str(spec.path("b.yaml"))}
    assert spec.store.parses == 2
    assert sorted(spec.docs()) == ["a", "b"]
    spec.store.scan()  # the periodic resync catches what no event reported
    assert sorted(spec.docs()) == ["a", "b", "c"]


def test_refresh_of_an_unchanged_file_parses_nothing(spec):
    spec.write("a.yaml")
    spec.store.scan()
    assert spec.store.refresh([str(spec.path("a.yaml"))] * 3) == set()
    assert spec.store.parses == 1


def test_refresh_of_a_folder_picks_up_new_and_removed_files(spec):
    spec.write("team/a.yaml")
    spec.write("other.yaml")
    spec.store.scan()
    spec.path("team/a.yaml").unlink()
    spec.write("team/b.yaml")
    changed = spec.store.refresh([str(spec.path("team"))])
    assert changed == {str(spec.path("team/a.yaml")), str(spec.path("team/b.yaml"))}
    assert sorted(spec.docs()) == ["b", "other"]


def test_refresh_accepts_relative_paths(spec, monkeypatch):
    spec.store.scan()
    spec.write("a.yaml")
    monkeypatch.chdir(spec.dir)
    assert spec.store.refresh(["a.yaml"]) == {str(spec.path("a.yaml"))}
    assert sorted(spec.docs()) == ["a"]


def test_refresh_ignores_paths_outside_the_spec_dir(spec, tmp_path):
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(JOB)
    spec.store.scan()
    assert spec.store.refresh([str(elsewhere)]) == set()
    assert spec.docs() == {}


@pytest.mark.parametrize("folder", [".git", ".github/workflows"])
def test_refresh_of_a_hidden_folder_reads_nothing(spec, folder):
    """A git pull in a GitOps checkout fires events for .git/ and .github/: still ignored."""
    spec.write(f"{folder}/ci.yml", "on: push\njobs: {}\n")
    spec.store.scan()
    assert spec.docs() == {}
    spec.store.refresh([str(spec.path(folder))])
    assert spec.docs() == {}


def test_parse_cache_spares_a_restart_from_reparsing_unchanged_files(tmp_path):
    import os as _os

    from controller.observe.manifests import ManifestStore

    spec = tmp_path / "jobs"
    spec.mkdir()
    for i in range(5):
        (spec / f"j{i}.yaml").write_text(f"spec:\n  command: [echo, '{i}']\n")
    (spec / "bad.yaml").write_text("spec:\n  command: [echo]\n  resources: {gpus: -1}\n")
    cache = tmp_path / "cache.json"
    first = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    first.scan()
    first.save_cache(force=True)
    assert first.parses == 6

    second = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    second.scan()
    assert (second.cache_hits, second.parses) == (5, 1)  # the invalid one is parsed again for its line
    bad = next(d for f in second.files.values() for d in f.documents if d.name == "bad")
    assert "line 3" in bad.message
    assert sorted(d.name for d in second.documents()) == sorted(d.name for d in first.documents())
    # the spec hashes come from the cache too, and are the ones a parse computes
    hashes = lambda store: {d.name: (d.spec_hash, d.run_hash) for d in store.documents() if d.name != "bad"}
    assert hashes(second) == hashes(first) and len(hashes(first)) == 5

    (spec / "j0.yaml").write_text("spec:\n  command: [echo, changed]\n")
    _os.utime(spec / "j0.yaml", ns=(1, 1))
    third = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    third.scan()
    assert third.parses == 2  # j0 changed, bad as before
    assert [d.spec.command for d in third.documents() if d.name == "j0"] == [["echo", "changed"]]


def test_a_corrupt_parse_cache_is_ignored(tmp_path):
    from controller.observe.manifests import ManifestStore

    spec = tmp_path / "jobs"
    spec.mkdir()
    (spec / "a.yaml").write_text("spec:\n  command: [echo]\n")
    cache = tmp_path / "cache.json"
    from controller.observe.manifests import CACHE_VERSION

    cache.write_text(f'{{"version": {CACHE_VERSION}, "specDir": "{spec}", "files": {{"x": 5}}}}')
    store = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    store.scan()
    assert store.parses == 1 and [d.name for d in store.documents()] == ["a"]


def test_a_restart_admits_cached_jobs_from_their_facts_and_builds_each_model_only_when_read(tmp_path):
    """The parse cache keeps what admission reads of each plain Job; a restart admits them without
    pydantic, and a job's model, when something reads it, is the one a parse builds."""
    from controller.observe.manifests import ManifestStore

    spec = tmp_path / "jobs"
    spec.mkdir()
    (spec / "plain.yaml").write_text("spec:\n  command: [echo, hi]\n")  # named after its file
    (spec / "rich.yaml").write_text(
        "metadata: {name: rich, labels: {team: a}}\n"
        "spec:\n  command: [echo]\n  priority: 7\n  resources: {gpus: 2}\n  ttlSecondsAfterFinished: 90\n"
        "  dependsOn: [plain]\n  cancelled: true\n"
    )
    (spec / "two.yaml").write_text(
        "metadata: {name: first}\nspec: {command: [echo, '1']}\n---\n---\nmetadata: {name: second}\nspec: {script: 'echo 2'}\n"
    )
    (spec / "sweep.yaml").write_text(
        "kind: Sweep\nmetadata: {name: sw}\nspec:\n  template: {command: [echo, '{x}']}\n  matrix: {x: ['1', '2']}\n"
    )
    cache = tmp_path / "cache.json"
    first = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    first.scan()
    first.save_cache(force=True)

    second = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    second.scan()
    assert (second.cache_hits, second.parses) == (4, 0)
    jobs = {d.name: d for d in second.documents() if isinstance(d, AdmittedJob)}
    before = {d.name: d for d in first.documents() if isinstance(d, AdmittedJob)}
    assert sorted(jobs) == sorted(before) == ["first", "plain", "rich", "second", "sw-0", "sw-1"]
    plain_files = {"plain", "rich", "first", "second"}
    assert all(not model_built(jobs[n]) for n in plain_files)  # admitted from the cached facts alone
    assert jobs["rich"].facts == (7, 2, {"team": "a"}, 90.0, True, False, True)
    for name, job in jobs.items():
        assert job.facts == before[name].facts
        assert (job.spec_hash, job.run_hash, job.doc_index, job.source) == (
            before[name].spec_hash,
            before[name].run_hash,
            before[name].doc_index,
            before[name].source,
        )
        assert job.job == before[name].job  # built on first read, as a parse builds it
    assert jobs["plain"].job.metadata.name == "plain" and model_built(jobs["rich"])


def test_a_cache_entry_with_bad_facts_is_validated_again(tmp_path):
    from controller.observe.manifests import ManifestStore

    spec = tmp_path / "jobs"
    spec.mkdir()
    (spec / "a.yaml").write_text("metadata: {labels: {k: v}}\nspec:\n  command: [echo]\n  priority: 3\n")
    cache = tmp_path / "cache.json"
    first = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    first.scan()
    first.save_cache(force=True)
    entries = _cache_entries(cache)
    ((path, entry),) = entries.items()
    facts = list(entry[3][0])
    facts[4] = "high"  # a priority that is not a number
    _write_cache(cache, spec, {path: (*entry[:3], (tuple(facts),))})

    store = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    store.scan()
    (job,) = store.documents()
    assert store.parses == 0 and store.cache_hits == 1  # validated from the cached parse instead
    assert model_built(job) and job.priority == 3 and job.labels == {"k": "v"}


def test_a_cache_entry_that_is_not_one_costs_a_parse(tmp_path):
    """Entries are checked as they are used: one of another shape, or whose key is not a key, is
    dropped and its file parsed; the good entries beside it are used."""
    from controller.observe.manifests import ManifestStore

    spec = tmp_path / "jobs"
    spec.mkdir()
    for name in ("a", "b", "c", "d", "good"):
        (spec / f"{name}.yaml").write_text("spec:\n  command: [echo]\n")
    cache = tmp_path / "cache.json"
    first = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    first.scan()
    first.save_cache(force=True)
    entries = _cache_entries(cache)
    at = lambda name: str(spec / f"{name}.yaml")
    entries[at("a")] = 5
    entries[at("b")] = entries[at("b")][:3]
    entries[at("c")] = (list(entries[at("c")][0]), *entries[at("c")][1:])  # a key as the JSON cache had it
    entries[at("d")] = (*entries[at("d")][:3], [entries[at("d")][3][0]])  # jobs a list, not a tuple
    _write_cache(cache, spec, entries)
    store = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    store.scan()
    assert (store.parses, store.cache_hits) == (3, 2)  # d: its key holds, its parse is validated again
    assert sorted(d.name for d in store.documents()) == ["a", "b", "c", "d", "good"]


def test_the_parse_cache_is_rewritten_for_one_file_in_a_hundred_or_at_a_clean_stop(tmp_path):
    """Rewriting the cache costs O(files): a resync after one edit among many does not pay it."""
    import os as _os

    from controller.observe.manifests import ManifestStore

    spec = tmp_path / "jobs"
    spec.mkdir()
    for i in range(200):
        (spec / f"j{i}.yaml").write_text("spec:\n  command: [echo]\n")
    cache = tmp_path / "cache.json"
    store = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    store.scan()
    store.save_cache()  # 200 parsed: written
    written = cache.read_bytes()
    assert len(_cache_entries(cache)) == 200

    (spec / "j0.yaml").write_text("spec:\n  command: [echo, changed]\n")
    _os.utime(spec / "j0.yaml", ns=(1, 1))
    assert store.scan() == {str(spec / "j0.yaml")}
    store.save_cache()  # 1 of 200: not yet
    assert cache.read_bytes() == written
    store.save_cache(any_change=True)  # a clean stop
    assert cache.read_bytes() != written and b"changed" in cache.read_bytes()

    small = tmp_path / "small"
    small.mkdir()
    (small / "a.yaml").write_text("spec:\n  command: [echo]\n")
    few = ManifestStore(small, lambda p: f"small/{os.path.basename(p)}", tmp_path / "small.json")
    few.scan()
    few.save_cache()  # a home of a few files: every change is written at once, as before
    assert (tmp_path / "small.json").exists()


def test_the_parse_cache_serves_files_whose_paths_json_escapes(tmp_path):
    """The cache's paths are read without json when they hold no escape: paths that do (a quote,
    a backslash, non-ASCII) are still found, not parsed again."""
    from controller.observe.manifests import ManifestStore

    spec = tmp_path / 'sp"ec\\dir-é'
    (spec / "équipe").mkdir(parents=True)
    (spec / "équipe" / "a.yaml").write_text("spec:\n  command: [echo]\n")
    (spec / "plain.yaml").write_text("spec:\n  command: [echo]\n")
    cache = tmp_path / "cache.json"
    first = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    first.scan()
    first.save_cache(force=True)

    second = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    assert sorted(second._warm) == sorted(first.files)
    second.scan()
    assert (second.cache_hits, second.parses) == (2, 0)
    assert sorted(d.name for d in second.documents()) == ["a", "plain"]


def test_a_restart_holds_a_cached_file_of_one_job_as_that_job_until_it_changes(tmp_path):
    """A file of one plain Job found as the parse cache saw it is one object, the store's entry and
    the admitted document (``CachedJob``: no ``ManifestFile`` nor list per file at 50,000); it says
    what a parse says, the cache it writes back is the same bytes, and an edit or a delete of the
    file is a change as ever."""
    from controller.model.documents import CachedJob
    from controller.observe.manifests import ManifestStore

    spec = tmp_path / "jobs"
    spec.mkdir()
    (spec / "one.yaml").write_text("metadata: {name: one, labels: {team: a}}\nspec: {command: [echo], priority: 3}\n")
    (spec / "other.yaml").write_text("spec: {command: [echo]}\n")
    (spec / "two.yaml").write_text(
        "metadata: {name: x}\nspec: {command: [echo]}\n---\nmetadata: {name: y}\nspec: {command: [echo]}\n"
    )
    cache = tmp_path / "cache.json"
    first = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    first.scan()
    first.save_cache(force=True)
    written = _cache_entries(cache)

    second = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    second.scan()
    assert (second.cache_hits, second.parses) == (3, 0)
    one = str(spec / "one.yaml")
    entry = second.files[one]
    assert type(entry) is CachedJob and entry.documents == [entry]
    assert type(second.files[str(spec / "two.yaml")]) is not CachedJob  # two jobs: a ManifestFile as ever
    before = first.files[one].documents[0]
    assert (entry.name, entry.source, entry.path, entry.doc_index, entry.spec_hash, entry.run_hash, entry.facts) == (
        before.name,
        before.source,
        before.path,
        before.doc_index,
        before.spec_hash,
        before.run_hash,
        before.facts,
    )
    assert (entry.owner_uid, entry.mtime_ns, entry.key) == (before.owner_uid, before.mtime_ns, first.files[one].key)
    assert not model_built(entry) and entry.job == before.job
    second.save_cache(force=True)
    assert _cache_entries(cache) == written  # the same entries (marshal may share objects otherwise)

    second.take_changes()
    (spec / "one.yaml").write_text("metadata: {name: one}\nspec: {command: [echo, v2]}\n")
    assert second.refresh([one]) == {one}
    gone, came = second.take_changes()
    assert gone == [entry] and gone[0] is entry
    (new,) = came
    assert type(new) is AdmittedJob and new.spec_hash != entry.spec_hash and second.files[one].documents == [new]

    other = str(spec / "other.yaml")
    cached_other = second.files[other]
    os.unlink(other)
    assert second.refresh([other]) == {other}
    assert second.take_changes() == ([cached_other], []) and other not in second.files


@pytest.mark.parametrize("damage", ["cut", "header", "garbage", "not-a-dict"])
def test_a_torn_or_foreign_parse_cache_costs_a_parse(tmp_path, damage):
    """The cache is one marshal blob after a header line naming its version, spec dir and the
    Python and marshal versions: a file cut short, of another header, with bytes that are no
    blob, or whose blob is not the map of entries is ignored, every file parsed, and the cache
    written anew by the next save."""
    import marshal

    from controller.observe.manifests import ManifestStore

    spec = tmp_path / "jobs"
    spec.mkdir()
    (spec / "a.yaml").write_text("spec:\n  command: [echo]\n")
    cache = tmp_path / "cache.json"
    first = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    first.scan()
    first.save_cache(force=True)
    data = cache.read_bytes()
    head, _, blob = data.partition(b"\n")
    cache.write_bytes(
        {
            "cut": data[:-7],
            "header": head.replace(b'"marshal": ', b'"marshal": 1') + b"\n" + blob,
            "garbage": head + b"\n" + b"\x00not marshal",
            "not-a-dict": head + b"\n" + marshal.dumps(list(_cache_entries(cache).items())),
        }[damage]
    )
    second = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    assert second._warm == {}
    second.scan()
    assert (second.parses, second.cache_hits) == (1, 0) and [d.name for d in second.documents()] == ["a"]
    second.save_cache()
    assert _cache_entries(cache).keys() == {str(spec / "a.yaml")}


def _cache_entries(cache) -> dict:
    """The parse cache's entries, ``{path: (key, parsed JSON, hashes, jobs)}``, as a start reads them."""
    import json
    import marshal

    head, newline, blob = cache.read_bytes().partition(b"\n")
    assert newline and json.loads(head)["version"]
    return {path: marshal.loads(entry) for path, entry in marshal.loads(blob).items()}


def _write_cache(cache, spec, entries: dict) -> None:
    from controller.observe.manifests import cache_bytes

    cache.write_bytes(cache_bytes(spec, entries))
    os.chmod(cache, 0o600)


def test_a_start_takes_unchanged_files_from_the_cache_and_reads_every_other(tmp_path):
    """A start's scan takes a file straight from its cache entry only while the walk's ``stat``
    gives the entry's key: a manifest rewritten in place while gflowd was down (same size, new
    mtime; or its old mtime put back, ``touch -r``: a new ctime) is parsed, and so is one that
    became a symlink, or is new; a removed one is gone; a subfolder's unchanged file is a hit."""
    from controller.model.documents import CachedJob

    spec = tmp_path / "jobs"
    (spec / "team").mkdir(parents=True)
    job = "spec:\n  command: [echo, {}]\n"
    for name in ("same", "edited", "touched", "linked", "removed"):
        (spec / f"{name}.yaml").write_text(job.format("a"))
    (spec / "team" / "deep.yaml").write_text(job.format("a"))
    (spec / "target.txt").write_text(job.format("t"))
    cache = tmp_path / "cache.json"
    first = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    first.scan()
    first.save_cache(force=True)

    (spec / "edited.yaml").write_text(job.format("b"))  # in place: same inode, same size
    os.utime(spec / "edited.yaml", ns=(1, 1))
    touched = spec / "touched.yaml"
    before = touched.stat()
    with open(touched, "r+") as handle:  # in place, same size, then its old mtime put back
        handle.write(job.format("c"))
    os.utime(touched, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (touched.stat().st_mtime_ns, touched.stat().st_size, touched.stat().st_ino) == (
        before.st_mtime_ns,
        before.st_size,
        before.st_ino,
    )
    (spec / "linked.yaml").unlink()
    (spec / "linked.yaml").symlink_to(spec / "target.txt")
    (spec / "removed.yaml").unlink()
    (spec / "added.yaml").write_text(job.format("d"))

    second = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    changed = second.scan()
    assert (second.cache_hits, second.parses) == (2, 4)
    commands = {d.name: d.job.spec.command for d in second.documents()}
    assert commands == {
        "same": ["echo", "a"],
        "deep": ["echo", "a"],
        "edited": ["echo", "b"],
        "touched": ["echo", "c"],
        "linked": ["echo", "t"],
        "added": ["echo", "d"],
    }
    assert type(second.files[str(spec / "same.yaml")]) is CachedJob
    assert type(second.files[str(spec / "team" / "deep.yaml")]) is CachedJob
    assert second.files[str(spec / "linked.yaml")].via_symlink
    assert str(spec / "removed.yaml") not in changed and second._warm == {}
