"""The I/O around ``controller.api.submit`` (``gflowctl run``'s pure part), shared by ``gflowctl
run`` and ``Client.submit``/``sweep``: the script file and its directives, the free random suffix,
the last job this user submitted (``--after @``), checks against the jobs that exist, and writing
the manifest through apply's own writer (checked by gflowd's admission when it runs, created only
if no one created it meanwhile). Errors are ``GflowError`` with gflowctl's line."""

from __future__ import annotations

import json
import os

from controller.api.submit import Submission, SubmitError, build, merge, read_directives
from controller.client.errors import GflowError
from controller.client.read.state import find_manifest, job_rows, read_table
from controller.client.write.manifests import Doc, EarlyManifest, check_inputs, read_manifest_text, store_document
from controller.paths import Home

TYPE_CHECKING = False  # not typing's: run's start-up imports neither typing, dataclasses nor secrets
if TYPE_CHECKING:
    from pathlib import Path  # not at run time: run imports no pathlib (util/lean_path.py)
    from typing import Any

ORIGIN = "run's manifest (--dry-run -o yaml shows it)"  # its line numbers are that text's
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


class Script:
    """A script file to run, pinned, with the options and warnings of its directive lines."""

    __slots__ = ("name_from_sbatch", "options", "path", "text", "warnings")

    def __init__(
        self,
        path: str,
        text: str,
        options: dict[str, Any] | None = None,
        warnings: list[str] | None = None,
        name_from_sbatch: bool = False,
    ) -> None:
        self.path, self.text, self.name_from_sbatch = path, text, name_from_sbatch
        self.options = {} if options is None else options
        self.warnings = [] if warnings is None else warnings


def read_script(path: Path) -> Script:
    """``gflowctl run SCRIPT``: the script's text and its ``# GFLOW``/``#SBATCH`` directives."""
    if not path.exists():
        hint = "; to run a command put it after --: gflowctl run -- CMD [ARGS...]" if os.sep not in str(path) else ""
        raise GflowError(f"{path}: no such script{hint}")
    if path.is_dir():
        raise GflowError(f"{path}: is a folder, not a script")
    if not os.access(path, os.R_OK):
        raise GflowError(f"{path}: not readable")
    text = read_manifest_text(path)
    try:
        directives = read_directives(text, str(path))
    except SubmitError as exc:
        raise GflowError(str(exc)) from None
    return Script(str(path), text, directives.options, directives.warnings, directives.name_from_sbatch)


def build_submission(
    home: Home,
    options: dict[str, Any],
    *,
    command: list[str] | None = None,
    script: Script | None = None,
    script_args: list[str] | None = None,
    cwd: str,
) -> Submission:
    """The manifest one ``run`` writes (flags override a script's directives); then
    ``check_names`` before writing it."""
    name_from_sbatch = False
    if script is not None:
        name_from_sbatch = script.name_from_sbatch and "name" not in options
        options = merge(script.options, options)
    last_job = _last_job(home)
    for _ in range(20):
        try:
            submission = build(
                options,
                command=command,
                script_text=script.text if script is not None else None,
                script_path=os.path.abspath(script.path) if script is not None else None,
                script_args=script_args or [],
                cwd=cwd,
                suffix=_random_suffix(),
                last_job=last_job,
                name_from_sbatch=name_from_sbatch,
                environ=os.environ,
            )
        except SubmitError as exc:
            raise GflowError(str(exc)) from None
        if submission.exact_name or not _taken(home, submission.name):
            return submission
    raise GflowError("could not find a free job name; give one with --name")


def _taken(home: Home, name: str) -> bool:
    """A generated name's manifest exists already: the file the name would be written to is
    looked up, not the whole spec dir listed (a glob of it cost 65 ms at 10,000 manifests, on
    every ``run`` without --name)."""
    return any(os.path.lexists(home.spec_dir / f"{name}{suffix}") for suffix in (".yaml", ".yml"))


def check_program(submission: Submission, script: Script | None, script_args: list[str]) -> None:
    """What the job runs exists, can be executed and is no Python file bash or exec would choke on
    (``precheck.py``); looked at now, as the submitter, not after hours in the queue."""
    from controller.client.write.precheck import check_program as check  # lazy: run only
    from controller.client.write.precheck import check_script, job_path

    spec = submission.manifest["spec"].get("template", submission.manifest["spec"])
    if script is not None:
        problem = check_script(script.path, script_args)
    elif spec.get("command"):
        workdir = os.path.expanduser(spec.get("workingDir") or os.getcwd())
        if spec.get("condaEnv"):  # the environment's PATH is conda's: only a program given with a path is looked at
            problem = check(spec["command"], workdir, None) if os.sep in spec["command"][0] else None
        else:
            problem = check(spec["command"], workdir, *job_path(submission.environment, spec.get("env") or {}))
    else:
        problem = None
    if problem:
        raise GflowError(f"{problem} (--no-check submits it anyway)")


def check_names(home: Home, submission: Submission) -> None:
    """Every job it depends on exists and, when the user chose its name, that name is free."""
    spec = submission.manifest["spec"].get("template", submission.manifest["spec"])
    for dependency in spec.get("dependsOn", []):
        if not exists(home, dependency["job"]):
            raise GflowError(f"--after {dependency['job']}: no job or sweep of that name on {home.root}")
    if submission.exact_name and exists(home, submission.name):
        raise GflowError(
            f"{submission.name} already exists; choose another --name (gflowctl apply changes an existing job)"
        )


def check_submission(home: Home, text: str, early: EarlyManifest | None = None) -> tuple[Doc | None, list[str]]:
    """The running gflowd's verdict on a submission's manifest text (else the same check here):
    its document, or every error. ``early`` (see ``early_manifest``) is written while gflowd answers."""
    [(docs, errors)] = check_inputs(home, [(ORIGIN, text)], early=early)
    return (docs[0] if docs and not errors else None), errors


def early_manifest(home: Home, name: str, text: str, source: str | None = None) -> EarlyManifest:
    """The manifest ``store_submission`` will write for ``text``, to write while gflowd reviews it:
    pass it to ``check_submission`` and ``store_submission``, and abandon it in a ``finally``."""
    return EarlyManifest(home, name, text, source or ORIGIN)


def store_submission(
    home: Home,
    doc: Doc,
    dry_run: bool,
    source: str | None = None,
    environment: dict[str, str] | None = None,
    early: EarlyManifest | None = None,
) -> str:
    """Write the checked manifest into the spec dir; the verb (created). ``source``: the script it
    pins, whose mode the manifest never exceeds. ``environment`` (the submitter's,
    ``api/export.py``) is written first, so gflowd never sees the job without it (an ``early``
    manifest is a hidden temp until then)."""
    home.spec_dir.mkdir(parents=True, exist_ok=True)
    if dry_run or environment is None:
        return store_document(home, doc, dry_run, source=source, early=early)
    env_path = write_environment(home.spec_dir, doc.name, environment)
    try:
        return store_document(home, doc, dry_run, source=source, early=early)
    except BaseException:
        env_path.unlink(missing_ok=True)
        raise


def write_environment(folder: Path, name: str, environment: dict[str, str]) -> Path:
    """The job's ``.NAME.env`` beside its manifest: mode 0600, this user's, written whole and
    fsynced before its rename (~0.3 ms): the manifest's folder fsync that follows makes the name
    durable, and after a power loss a durable manifest never finds its environment empty."""
    from controller.api.export import ENV_FILE, encode  # lazy: only a submission that carries an environment
    from controller.util.fsutil import temp_beside  # lazy: as above (mkstemp's contract, no tempfile to import)

    path = folder / ENV_FILE.format(name=name)
    fd, temp = temp_beside(path)  # 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(encode(environment))
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(temp, path)
    except OSError as exc:
        os.unlink(temp)
        raise GflowError(f"cannot keep the job's environment in {path}: {exc.strerror}") from None
    return path


def exists(home: Home, name: str) -> bool:
    """A job or Sweep of this name is defined. Runs on every ``run --name`` and ``--after``: where
    gflowd keeps a jobs table it is read, not the whole index (a Sweep is known there as its
    children's owner; one with no child yet by its file, as for a job not yet in the table)."""
    table = read_table(home)
    if table is None:
        return name in job_rows(home) or any(find_manifest(home, name, kind) for kind in ("job", "sweep"))
    from controller.util.jobs_table import OWNER  # lazy: as read_table

    if name in table.rows or any(row[OWNER] == name for row in table.rows.values()):
        return True
    if home.status_file(name).exists():  # written before the table (up to a second): a job of that name
        return True
    return any(os.path.lexists(home.spec_dir / f"{name}{suffix}") for suffix in (".yaml", ".yml"))


def free_suffix(home: Home) -> str:
    """Five random letters and digits: short to read, and checked to be free."""
    for _ in range(20):
        suffix = _random_suffix()
        if not any(p.name.endswith(f"-{suffix}.yaml") for p in home.spec_dir.glob(f"*-{suffix}.yaml")):
            return suffix
    raise GflowError("could not find a free job name; give one with --name")


def _random_suffix() -> str:
    """Five characters of ``_ALPHABET``, each uniform: from ``os.urandom`` as ``secrets`` would
    draw them, without importing it (hashlib, hmac, random: ~4 ms of run's start-up). Bytes of 252
    and over are dropped, so every character has 7 of the 252 kept values."""
    out = ""
    while len(out) < 5:
        out += "".join(_ALPHABET[b % 36] for b in os.urandom(8) if b < 252)
    return out[:5]


# -- the last job submitted, per user, for --after @ ----------------------------------------------


def _memory_file() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    from controller.util.lean_path import lean  # lazy: only run remembers

    return lean(os.path.join(state, "gflow", "last-run.json"))


def _last_job(home: Home) -> str | None:
    try:
        return json.loads(_memory_file().read_text()).get(str(home.root))
    except (OSError, ValueError, AttributeError):
        return None


def remember(home: Home, name: str) -> str | None:
    """Best effort: a read-only home directory costs only ``--after @``. A warning when it failed."""
    from controller.util.fsutil import atomic_write  # lazy: only a real submission writes

    path = _memory_file()
    try:
        try:
            known = json.loads(path.read_text())
            known = known if isinstance(known, dict) else {}
        except (OSError, ValueError):
            known = {}
        known = {root: last for root, last in known.items() if os.path.isdir(root)}  # homes gone: forgotten
        known[str(home.root)] = name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(known, indent=1) + "\n", durable=False)
    except OSError as exc:
        return f"could not remember the last job in {path}: {exc.strerror}"
    return None
