"""``gflowctl apply`` and ``delete``: write and remove manifests in the spec directory.

What apply writes, and how it keeps the user's text, is ``controller.client.write.manifests`` (the
Python client's ``apply`` is the same function); this module prints it. ``delete`` removes a job
defined inside a multi-document file in place, leaving the other documents byte-for-byte alone,
through ``fsutil.rewrite_locked`` like every rewrite.
"""

from __future__ import annotations

import sys

from controller.cli.common import CliError, print_error, printable
from controller.cli.live import Progress
from controller.client.read.state import document_position, find_manifest, owner_of
from controller.client.write.manifests import apply_inputs, check_inputs, read_inputs
from controller.paths import Home
from controller.util.fsutil import RewriteError, lock_held, rewrite_locked
from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one

TYPE_CHECKING = False  # not typing's: run's and apply's start-up imports no pathlib (util/lean_path.py)
if TYPE_CHECKING:
    from pathlib import Path


def apply(home: Home, filenames: list[str], recursive: bool, dry_run: bool) -> int:
    errors: list[str] = []
    inputs = read_inputs(filenames, recursive)
    progress = Progress(len(inputs), "applying")  # on stderr, only on a terminal, only for many files
    stored = 0
    for outcome in apply_inputs(home, inputs, dry_run, on_input=progress.step):
        if isinstance(outcome, str):
            errors.append(outcome)
            continue
        stored += outcome.verb not in ("unchanged", "skipped")
        progress.clear()
        print(
            f"{outcome.kind}/{outcome.name} {outcome.verb}" + (" (dry run)" if dry_run else ""), flush=progress.enabled
        )
        if outcome.warning:
            sys.stderr.write(f"warning: {printable(outcome.warning)}\n")
    progress.done()
    if stored and not dry_run and not lock_held(home.lock_file):
        sys.stderr.write(f"warning: gflowd is not running for {home.root}; the jobs start when it runs (gflowd up)\n")
    for error in errors:
        print_error(error)
    return 1 if errors else 0


def delete(home: Home, refs: list[tuple[str, str]], filenames: list[str]) -> int:
    """Delete each ``(kind, name)`` and every document of ``filenames`` (their manifests, or the
    document in a multi-document file); each failure is one line, the others go on."""
    targets = list(refs)
    for docs, errors in check_inputs(home, read_inputs(filenames, False)) if filenames else []:
        if errors:
            raise CliError(errors[0])
        targets.extend((d.kind, d.name) for d in docs if not d.skip)
    if not targets:
        raise CliError("name the jobs to delete: gflowctl delete job NAME... (or job/NAME sweep/NAME ...) or -f FILE")

    failed = False
    for kind, name in targets:
        owner = owner_of(home, name) if kind == "job" else None
        if owner is not None:
            print_error(f"job/{name} belongs to sweep/{owner}; delete the sweep or change its matrix")
            failed = True
            continue
        path = find_manifest(home, name, kind)
        if path is None:
            print_error(f"{kind}/{name} not found")
            failed = True
            continue

        def cut(text: str, name: str = name, path: Path = path) -> str | None:
            parts = list(iter_documents_text(text))
            position = document_position(parts, name, path)
            if position is None and len(parts) == 1 and path.stem == name and not _parses(parts[0]):
                return None  # a file named for the job that does not parse (Rejected/YAMLError): it goes
            if position is None:
                raise _NotIn
            if len(parts) == 1:
                return None  # the whole file goes
            del parts[position]
            from controller.util.manifest_edit import join_documents  # lazy: apply needs it not (typing)

            return join_documents(parts)

        try:
            rewrite_locked(path, cut, within=home.spec_dir)
        except (_NotIn, FileNotFoundError):
            print_error(f"{kind}/{name} not found in {path}")
            failed = True
            continue
        except RewriteError as exc:
            print_error(f"{kind}/{name}: not deleted: {exc}")
            failed = True
            continue
        print(f"{kind}/{name} deleted")
        _forget_environment(path.parent, name)
    return 1 if failed else 0


def _forget_environment(folder: Path, name: str) -> None:
    """The submitter's environment ``run`` kept for the job (``api/export.py``) goes with it."""
    from controller.api.export import ENV_FILE  # lazy: only delete forgets

    try:
        (folder / ENV_FILE.format(name=name)).unlink()
    except OSError:
        pass  # none kept (a hand-written manifest), or not ours to remove


def _parses(text: str) -> bool:
    try:
        load_one(text)
    except YAMLSyntaxError:
        return False
    return True


class _NotIn(Exception):
    """The file no longer defines the job."""
