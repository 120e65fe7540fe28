"""The file watch (``observe/watch.py``) on a real folder, with real inotify: every way a manifest
changes marks it dirty, and the kernel is not asked for opens and closes-without-write, which
gflowd's own reads of manifests would otherwise turn into wake-ups of the watch thread."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from helpers import wait_for

from controller.observe.watch import start_watching

IN_CLOSE_NOWRITE, IN_OPEN = 0x10, 0x20


class Seen:
    def __init__(self) -> None:
        self.paths: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, *paths: str) -> None:
        with self.lock:
            self.paths.extend(paths)

    def has(self, path: Path) -> bool:
        with self.lock:
            return str(path) in self.paths

    def clear(self) -> None:
        with self.lock:
            self.paths.clear()


@pytest.fixture
def watched(tmp_path):
    spec_dir = tmp_path / "jobs"
    spec_dir.mkdir()
    seen = Seen()
    observer = start_watching(spec_dir, seen)
    if observer is None:
        pytest.skip("watchdog is not installed")
    yield spec_dir, seen, observer
    observer.stop()
    observer.join(5)


def inotify_masks(pid: int) -> list[int]:
    """The event masks of every inotify watch ``pid`` holds, from ``/proc/PID/fdinfo``."""
    masks = []
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("inotify wd:"):
                fields = dict(part.split(":", 1) for part in line.split()[1:])
                masks.append(int(fields["mask"], 16))
    return masks


def test_every_kind_of_change_marks_the_manifest(watched, tmp_path):
    spec_dir, seen, _ = watched
    created = spec_dir / "a.yaml"
    created.write_text("metadata: {name: a}\n")
    wait_for(lambda: seen.has(created), timeout=10, message="a created manifest")

    staged = tmp_path / "b.yaml"
    staged.write_text("metadata: {name: b}\n")
    moved_in = spec_dir / "b.yaml"
    os.rename(staged, moved_in)  # what gflowctl apply and editors that save by rename do
    wait_for(lambda: seen.has(moved_in), timeout=10, message="a manifest renamed into the folder")

    seen.clear()
    with open(created, "a") as handle:  # edited in place
        handle.write("# edited\n")
    wait_for(lambda: seen.has(created), timeout=10, message="a manifest edited in place")

    seen.clear()
    moved_in.unlink()
    wait_for(lambda: seen.has(moved_in), timeout=10, message="a deleted manifest")

    sub = spec_dir / "team"
    sub.mkdir()
    inside = sub / "c.yaml"
    wait_for(lambda: seen.has(sub), timeout=10, message="a new folder")
    inside.write_text("metadata: {name: c}\n")
    wait_for(lambda: seen.has(inside), timeout=10, message="a manifest in a new folder")


def test_reading_manifests_asks_the_kernel_for_no_events(watched):
    spec_dir, seen, _ = watched
    masks = wait_for(lambda: inotify_masks(os.getpid()), timeout=10, message="the watch's inotify descriptor")
    assert not any(mask & (IN_OPEN | IN_CLOSE_NOWRITE) for mask in masks), [hex(mask) for mask in masks]

    manifest = spec_dir / "a.yaml"
    manifest.write_text("metadata: {name: a}\n")
    wait_for(lambda: seen.has(manifest), timeout=10, message="a created manifest")
    marker = spec_dir / "marker.yaml"
    for _ in range(20):
        manifest.read_text()  # what gflowd does with every manifest it parses
    marker.write_text("")  # events arrive in order: once this one is seen, the reads' would have been
    wait_for(lambda: seen.has(marker), timeout=10, message="the marker")
    assert seen.paths.count(str(manifest)) <= 3, seen.paths  # created, modified, closed: no more for the reads


def test_files_no_manifest_is_behind_wake_nothing(watched):
    """A user churning .txt files, swap files and temp files in their folder: the watch hands on
    none of them (each used to cost a pass), and a manifest written after them is still seen."""
    spec_dir, seen, _ = watched
    folder = spec_dir / "mallory"
    folder.mkdir()
    wait_for(lambda: seen.has(folder), timeout=10, message="the new folder")
    seen.clear()
    for k in range(200):
        for name in (f"f-{k}.txt", ".a.yaml.swp", f"b-{k}.yaml~", f".tmp-{k}"):
            path = folder / name
            path.write_text("x")
            path.unlink()
    manifest = folder / "m.yaml"
    manifest.write_text("metadata: {name: m}\n")
    wait_for(lambda: seen.has(manifest), timeout=10, message="the manifest after the churn")
    assert set(seen.paths) == {str(manifest)}, sorted(set(seen.paths))[:10]


def test_a_file_is_settled_only_once_it_is_whole(tmp_path):
    """What the loop may pass on at once (``on_settled``): a manifest renamed into place, closed
    after writing or deleted. One still being written (created, written, not yet closed) goes to
    ``on_paths``, which waits for quiet: its content may still be coming."""
    spec_dir = tmp_path / "jobs"
    spec_dir.mkdir()
    unsettled, settled = Seen(), Seen()
    watches = start_watching(spec_dir, unsettled, on_settled=settled)
    try:
        staged = tmp_path / "renamed.yaml"
        staged.write_text("metadata: {name: renamed}\n")
        renamed = spec_dir / "renamed.yaml"
        os.rename(staged, renamed)  # what gflowctl apply and run do
        wait_for(lambda: settled.has(renamed), timeout=10, message="a manifest renamed into place, settled")

        writing = spec_dir / "writing.yaml"
        with open(writing, "w") as handle:
            handle.write("metadata: {name: writing}\n")
            handle.flush()
            wait_for(lambda: unsettled.has(writing), timeout=10, message="a manifest being written, unsettled")
            assert not settled.has(writing)  # no event of it said it is whole yet
            handle.write("spec:\n  command: [sleep, '1']\n")
        wait_for(lambda: settled.has(writing), timeout=10, message="the manifest closed after writing, settled")

        settled.clear()
        renamed.unlink()
        wait_for(lambda: settled.has(renamed), timeout=10, message="a deleted manifest, settled")
    finally:
        watches.stop()
        watches.join(5)


def test_a_lone_whole_change_passes_at_once_a_burst_waits_for_quiet():
    """The loop's debounce is for bursts: the first settled change after quiet is ready at once;
    an unsettled one, or the next change of a burst, waits for the quiet time (an hour here, so
    nothing else can make it ready)."""

    loop = _timing_only_loop()
    try:
        loop.mark_settled("/jobs/a.yaml")
        assert loop._dirty_ready(time.monotonic())
        assert loop._take_dirty() == {"/jobs/a.yaml"}
        loop.mark_settled("/jobs/b.yaml")  # right after a: a burst
        assert not loop._dirty_ready(time.monotonic())
        loop._take_dirty()
        loop._last_dirty = 0.0  # quiet again
        loop.mark_dirty("/jobs/c.yaml")  # still being written
        assert not loop._dirty_ready(time.monotonic())
    finally:
        os.close(loop._wake_r)
        os.close(loop._wake_w)


def test_the_at_once_pass_waits_for_the_other_files_of_one_review(tmp_path):
    """Files one review let a caller store (``apply -f DIR``): the first one landing after quiet
    waits for the others (``daemon/landings.py``), then all of them are ready at once, together."""
    loop = _timing_only_loop()
    first, second = str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")
    loop.landings.expect([first, second], time.monotonic())
    try:
        landed = time.monotonic()
        loop.mark_settled(first)
        assert not loop._dirty_ready(landed)  # not the first file alone...
        loop.mark_settled(second)
        assert loop._dirty_ready(landed)  # ...but once the other has landed: no debounce
        assert loop._take_dirty() == {first, second}
    finally:
        os.close(loop._wake_r)
        os.close(loop._wake_w)


def _timing_only_loop():
    from types import SimpleNamespace

    from controller.daemon.landings import Landings
    from controller.daemon.loop import Controller

    loop = Controller.__new__(Controller)  # only the timing state: no home, no runtime
    loop.config = SimpleNamespace(debounce=3600.0)
    loop._dirty, loop._lock, loop._first_dirty, loop._last_dirty, loop._at_once = (
        set(),
        threading.Lock(),
        None,
        0.0,
        False,
    )
    loop.landings = Landings()
    loop._wake_r, loop._wake_w = os.pipe()
    os.set_blocking(loop._wake_w, False)
    return loop
