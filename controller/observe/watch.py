"""File watching: a watchdog thread turns file events into callbacks (a spec-dir path changed, the
fake-GPU file changed, an admission review request arrived); the loop decides when to pass.

Observes only. Without watchdog, changes are seen on the resync tick.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable

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


def start_watching(
    spec_dir: Path,
    on_paths: Callable[..., None],
    fake_gpus: Path | None = None,
    on_gpus: Callable[[], None] | None = None,
    review_dir: Path | None = None,
    on_review: Callable[[Path], None] | None = None,
) -> Any:
    """A started watchdog observer (``.stop()`` it), or None when watchdog is missing."""
    try:
        # lazy: watchdog starts threads and costs ~30 ms; only gflowd's loop watches
        from watchdog import events
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:  # pragma: no cover - a dependency; resync still works without it
        log.warning("watchdog is not installed: changes are seen on the resync tick only")
        return None

    class SpecHandler(FileSystemEventHandler):
        def on_any_event(self, event):
            if event.event_type in ("opened", "closed_no_write"):
                return
            if event.is_directory and event.event_type in ("modified", "closed"):
                return  # a folder "modified" by a file inside: the file's own event says which
            paths = [os.fsdecode(p) for p in (event.src_path, getattr(event, "dest_path", "") or "") if p]
            if not event.is_directory and not any(map(may_matter, paths)):
                return  # a .txt, a swap file, an editor's temp file: no pass for what no manifest is
            on_paths(*paths)

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

    # The kinds each watch asks the kernel for. Without a filter inotify also reports every open
    # and close: gflowd reading a manifest woke the watchdog thread twice for nothing, and in a
    # burst of 1,000 new jobs that thread took ~15 % of gflowd's CPU.
    changes = [events.FileCreatedEvent, events.FileModifiedEvent, events.FileClosedEvent, events.FileMovedEvent,
               events.FileDeletedEvent]
    folders = [events.DirCreatedEvent, events.DirMovedEvent, events.DirDeletedEvent]  # a folder of manifests
    observer = Observer()
    observer.daemon = True
    observer.schedule(SpecHandler(), str(spec_dir), recursive=True, event_filter=changes + folders)
    if review_dir is not None:
        observer.schedule(ReviewHandler(), str(review_dir), recursive=False,
                          event_filter=[events.FileCreatedEvent, events.FileMovedEvent])
    if fake_gpus is not None and fake_gpus.parent.is_dir():
        observer.schedule(GpuFileHandler(), str(fake_gpus.parent), recursive=False, event_filter=changes)
    observer.start()
    return observer
