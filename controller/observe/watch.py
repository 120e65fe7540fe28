"""File watching: file events become callbacks (a spec-dir path changed, the fake-GPU file changed,
an admission review request arrived); the loop decides when to pass. The spec dir has its own
inotify thread (``inotify.py``: events no manifest is behind are dropped as they are read);
watchdog watches the rest.

Observes only. Without a watch, changes are seen on the resync tick.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.observe.inotify import SpecWatch
from controller.paths import is_manifest_name

log = logging.getLogger("gflowd")


def may_matter(path: str) -> bool:
    """Can a file event at ``path`` change what the spec dir says? A manifest's name can, and so
    can a name without a suffix (a symlink to a folder of manifests); a hidden entry, an editor's
    leftover or any other suffix (``.txt``, ``.swp``, ``.tmp``) cannot. A user creating and
    deleting .txt files in their folder as fast as they can made gflowd pass for each one, and
    everyone's submissions waited behind those passes. (A symlink to a folder whose name has a
    suffix, ``exp.v2``, is seen at the next resync.)"""
    name = os.path.basename(path)
    if is_manifest_name(name):
        return True
    return not (name.startswith((".", "#")) or name.endswith("~") or "." in name)


class Watches:
    """The spec dir's inotify thread and watchdog's observer (the fake-GPU file, review requests)."""

    def __init__(self, *parts: Any) -> None:
        self.parts = [p for p in parts if p is not None]

    def stop(self) -> None:
        for part in self.parts:
            part.stop()

    def join(self, timeout: float | None = None) -> None:
        for part in self.parts:
            part.join(timeout)


def start_watching(
    spec_dir: Path,
    on_paths: Callable[..., None],
    fake_gpus: Path | None = None,
    on_gpus: Callable[[], None] | None = None,
    review_dir: Path | None = None,
    on_review: Callable[[Path], None] | None = None,
    on_settled: Callable[..., None] | None = None,
) -> Any:
    """Started watches (``.stop()`` them): the spec dir's own inotify thread (``inotify.py``), and
    watchdog for the fake-GPU file and the review requests, when watchdog is installed. Paths
    whose files are whole go to ``on_settled`` when given (``SpecWatch``), the others to ``on_paths``."""
    spec: SpecWatch | None
    try:
        spec = SpecWatch(str(spec_dir), on_paths, may_matter, on_settled)
    except OSError as exc:  # no inotify (or no descriptor left): the resync still sees every change
        log.warning("cannot watch %s (%s): changes are seen on the resync tick only", spec_dir, exc)
        spec = None
    else:
        spec.start()
    if fake_gpus is None and review_dir is None:
        return Watches(spec)
    try:
        # lazy: watchdog starts threads and costs ~30 ms; only gflowd's loop watches
        from watchdog import events
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:  # pragma: no cover - a dependency; resync still works without it
        log.warning("watchdog is not installed: the fake-GPU file and review requests are seen on the resync tick only")
        return Watches(spec)

    class GpuFileHandler(FileSystemEventHandler):
        def on_any_event(self, event):
            if event.event_type in ("opened", "closed_no_write"):
                return
            paths = {os.fsdecode(event.src_path), os.fsdecode(getattr(event, "dest_path", "") or "")}
            if fake_gpus is not None and on_gpus is not None and str(fake_gpus) in paths:
                on_gpus()

    class ReviewHandler(FileSystemEventHandler):
        def on_any_event(self, event):
            if event.event_type not in ("created", "moved") or event.is_directory or on_review is None:
                return
            on_review(Path(os.fsdecode(getattr(event, "dest_path", "") or event.src_path)))

    # Without a filter inotify also reports every open and close (see inotify.py's MASK).
    changes = [
        events.FileCreatedEvent,
        events.FileModifiedEvent,
        events.FileClosedEvent,
        events.FileMovedEvent,
        events.FileDeletedEvent,
    ]
    observer = Observer()
    observer.daemon = True
    if review_dir is not None:
        observer.schedule(
            ReviewHandler(),
            str(review_dir),
            recursive=False,
            event_filter=[events.FileCreatedEvent, events.FileMovedEvent],
        )
    if fake_gpus is not None and fake_gpus.parent.is_dir():
        observer.schedule(GpuFileHandler(), str(fake_gpus.parent), recursive=False, event_filter=changes)
    observer.start()
    return Watches(spec, observer)
