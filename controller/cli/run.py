"""``gflowctl run [flags] -- CMD [ARGS...]`` and ``gflowctl run SCRIPT [ARGS...]``: submit in one line.

The I/O around ``controller.api.submit``: read the script and its directives, the current directory,
the last job this user submitted; then write a real manifest into the spec dir through apply's own
writer (checked by gflowd's admission when it runs, created only if no one created it meanwhile),
so get, describe, edit, cancel and git see an ordinary job. ``--wait`` and ``--follow`` then exit
with the job's exit code.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import string
import sys
import time
from pathlib import Path

from controller.api.submit import FLAGS, SubmitError, build, merge, parse_flags, read_directives, render
from controller.cli.common import CliError, print_error, printable, resolve_home
from controller.cli.manifests import check_inputs, read_manifest_text, store_document
from controller.client.state import find_manifest, is_running, job_rows, read_status
from controller.paths import Home

USAGE = """usage: gflowctl run [flags] -- CMD [ARGS...]
       gflowctl run [flags] SCRIPT [ARGS...]

Submit a job in one line: writes a manifest into the spec dir and prints job/NAME created.
The job runs in the current directory (--workdir to change). A SCRIPT is pinned: its text is
copied into the manifest, so editing the file later changes no queued job. Its leading comment
block may hold '# GFLOW --gpus 1' and '#SBATCH --gres=gpu:1' lines; flags override them.

flags:
"""

TERMINAL = {"Succeeded", "Failed", "Cancelled", "Rejected"}
_ALPHABET = string.ascii_lowercase + string.digits


def usage() -> str:
    rows = [f"  {', '.join(f.names):<24} {f.help}" for f in FLAGS]
    return USAGE + "\n".join(rows) + "\n  -h, --help               this text\n"


def run_verb(argv: list[str], home_arg: str | None, spec_dir_arg: str | None) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        sys.stdout.write(usage())
        return 0
    try:
        options, rest, after_dashes = parse_flags(argv)
    except SubmitError as exc:
        raise CliError(str(exc)) from None
    home = resolve_home(options.pop("home", home_arg), options.pop("spec_dir", spec_dir_arg))
    cli = {k: options.pop(k) for k in ("dry_run", "output", "quiet", "wait", "follow") if k in options}
    cli["interactive"] = bool(options.get("interactive"))  # kept in options too: build sets spec.tty
    if cli["interactive"] and (cli.get("wait") or cli.get("follow")):
        raise CliError("-it attaches to the job already: drop --wait/--follow")
    if cli["interactive"] and not rest:
        rest, after_dashes = [login_shell()], True
    if cli["interactive"] and os.environ.get("TERM") and not any(e.startswith("TERM=") for e in options.get("env", [])):
        options["env"] = [*options.get("env", []), f"TERM={os.environ['TERM']}"]  # the job draws for this terminal
    if cli.get("output") not in (None, "yaml", "name"):
        raise CliError(f"-o {cli['output']}: use -o yaml (with --dry-run) or -o name")
    cwd = os.getcwd()
    script_text = script_path = None
    warnings: list[str] = []
    name_from_sbatch = False
    if not rest:
        raise CliError("nothing to run: gflowctl run [flags] -- CMD [ARGS...] or gflowctl run SCRIPT")
    if not after_dashes:
        script_path = rest[0]
        script_text = _read_script(Path(script_path))
        directives = _directives(script_text, script_path)
        warnings = directives.warnings
        name_from_sbatch = directives.name_from_sbatch and "name" not in options
        options = merge(directives.options, options)
    try:
        submission = build(
            options,
            command=rest if after_dashes else None,
            script_text=script_text,
            script_path=os.path.abspath(script_path) if script_path else None,
            script_args=rest[1:],
            cwd=cwd,
            suffix=_suffix(home),
            last_job=_last_job(home),
            name_from_sbatch=name_from_sbatch,
        )
    except SubmitError as exc:
        raise CliError(str(exc)) from None
    for warning in warnings:
        sys.stderr.write(f"warning: {warning}\n")
    _check_dependencies(home, submission.manifest)
    if submission.exact_name and _exists(home, submission.name):
        raise CliError(f"{submission.name} already exists; choose another --name (gflowctl apply changes an existing job)")
    text = render(submission.manifest)
    return _submit(home, submission.kind, submission.name, text, cli)


def _read_script(path: Path) -> str:
    if not path.exists():
        hint = "; to run a command put it after --: gflowctl run -- CMD [ARGS...]" if os.sep not in str(path) else ""
        raise CliError(f"{path}: no such script{hint}")
    if path.is_dir():
        raise CliError(f"{path}: is a folder, not a script")
    if not os.access(path, os.R_OK):
        raise CliError(f"{path}: not readable")
    return read_manifest_text(path)


def _directives(text: str, origin: str):
    try:
        return read_directives(text, origin)
    except SubmitError as exc:
        raise CliError(str(exc)) from None


def _submit(home: Home, kind: str, name: str, text: str, cli: dict) -> int:
    origin = "run's manifest (--dry-run -o yaml shows it)"  # its line numbers are that text's
    [(docs, errors)] = check_inputs(home, [(origin, text)])
    if errors:
        for error in errors:
            print_error(error)
        return 1
    dry_run = bool(cli.get("dry_run"))
    if dry_run and cli.get("output") == "yaml":
        sys.stdout.write(text)
        return 0
    home.spec_dir.mkdir(parents=True, exist_ok=True)
    verb = store_document(home, docs[0], dry_run)
    if cli.get("quiet") or cli.get("output") == "name":
        print(name if cli.get("quiet") else f"{kind}/{name}", flush=True)
    else:
        print(f"{kind}/{name} {verb}" + (" (dry run)" if dry_run else ""), flush=True)
    if docs[0].warning:  # gflowd's review: it can never start here (still created: see apply)
        sys.stderr.write(f"warning: {printable(docs[0].warning)}\n")
    if dry_run:
        return 0
    _remember(home, name)
    if not is_running(home):
        sys.stderr.write(f"warning: gflowd is not running for {home.root}; the job starts when it runs\n")
    if cli.get("interactive"):
        return _interactive(home, name)
    if not (cli.get("wait") or cli.get("follow")):
        return 0
    if kind != "job":
        raise CliError(f"--wait and --follow take one job; see the sweep's children with gflowctl get jobs -l gflow.dev/sweep={name}")
    if cli.get("follow"):
        from controller.cli.logs import logs  # lazy: only --follow streams a log

        logs(home, name, True, None, None)
    return _exit_code(home, name)


def _exit_code(home: Home, name: str) -> int:
    """Wait for the job's end; its exit code (1 when it ended without one: cancelled, rejected)."""
    while True:
        status = (read_status(home, name) or {}).get("status") or {}
        phase = status.get("phase")
        if phase in TERMINAL:
            code = status.get("exitCode")
            if phase != "Succeeded":
                print_error(f"job/{name} {phase}: {status.get('reason')}" + (f": {status['message']}" if status.get("message") else ""))
            if isinstance(code, int) and 0 <= code < 256 and (code != 0 or phase == "Succeeded"):
                return code
            return 0 if phase == "Succeeded" else 1
        time.sleep(0.1)


def login_shell() -> str:
    """``run -it``'s default command: the user's login shell (passwd), else $SHELL, else sh."""
    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        shell = ""
    if not shell or shell.endswith(("/nologin", "/false")):
        shell = os.environ.get("SHELL") or "/bin/sh"
    return shell


def _interactive(home: Home, name: str) -> int:
    """``run -it``: while the job waits, why (updated in place); once it runs, this terminal is
    attached to it; the job's exit code. Ctrl-C while it waits cancels it, as with srun."""
    from controller.cli.attach import session  # lazy: only run -it attaches

    try:
        sock, status = _wait_for_session(home, name)
    except KeyboardInterrupt:
        from controller.cli.edit import control  # lazy: only an interrupted wait cancels

        control(home, "cancel", [("job", name)])
        return 130
    if sock is None:
        return _exit_code(home, name)
    devices = ",".join(str(d) for d in status.get("devices") or [])
    sys.stderr.write(f"job/{name} is running ({f'GPUs {devices}' if devices else 'no GPU'}); Ctrl-] detaches\r\n")
    ended, code = session(sock, name)
    if not ended:
        return 0
    return code if code is not None else _exit_code(home, name)


def _wait_for_session(home: Home, name: str):
    """(a connection to the job's terminal, its status) once it runs; (None, status) if it ended first."""
    from controller.cli.attach import job_owner  # lazy: only run -it attaches
    from controller.client.terminal import NoSession, connect

    line = _StatusLine(sys.stderr)
    try:
        while True:
            status = (read_status(home, name) or {}).get("status") or {}
            phase = status.get("phase")
            if phase in TERMINAL:
                return None, status
            uid = job_owner(home, name)
            if phase == "Running" and uid is not None:
                try:
                    return connect(home.control_socket(uid, name)), status
                except NoSession:
                    pass  # its supervisor is just starting
            elif phase:
                line.show(_waiting(name, status))
            else:
                line.show(f"job/{name}: waiting for gflowd to take it in" + ("" if is_running(home) else " (no gflowd runs for this home)"))
            time.sleep(0.2)
    finally:
        line.clear()


def _waiting(name: str, status: dict) -> str:
    text = f"job/{name} is {status.get('phase')}"
    if status.get("reason"):
        text += f": {status['reason']}"
    if status.get("message"):
        text += f": {status['message']}"
    if status.get("queuePosition"):
        text += f" (queue position {status['queuePosition']})"
    return printable(text)


class _StatusLine:
    """One line of progress, rewritten in place on a terminal; elsewhere printed when it changes."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.shown = ""
        self.tty = stream.isatty()

    def show(self, text: str) -> None:
        if text == self.shown:
            return
        self.shown = text
        self.stream.write(f"\r\033[K{text}" if self.tty else f"{text}\n")
        self.stream.flush()

    def clear(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()
        self.shown = ""


def _exists(home: Home, name: str) -> bool:
    return name in job_rows(home) or find_manifest(home, name) is not None or find_manifest(home, name, "sweep") is not None


def _suffix(home: Home) -> str:
    """Five random letters and digits: short to read, and checked to be free."""
    for _ in range(20):
        suffix = "".join(secrets.choice(_ALPHABET) for _ in range(5))
        if not any(p.name.endswith(f"-{suffix}.yaml") for p in home.spec_dir.glob(f"*-{suffix}.yaml")):
            return suffix
    raise CliError("could not find a free job name; give one with --name")


def _check_dependencies(home: Home, manifest: dict) -> None:
    spec = manifest["spec"].get("template", manifest["spec"])
    for dependency in spec.get("dependsOn", []):
        if not _exists(home, dependency["job"]):
            raise CliError(f"--after {dependency['job']}: no job or sweep of that name on {home.root}")


# -- the last job submitted, per user, for --after @ ----------------------------------------------


def _memory_file() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "gflow" / "last-run.json"


def _last_job(home: Home) -> str | None:
    try:
        return json.loads(_memory_file().read_text()).get(str(home.root))
    except (OSError, ValueError, AttributeError):
        return None


def _remember(home: Home, name: str) -> None:
    """Best effort: a read-only home directory costs only ``--after @``."""
    from controller.util.fsutil import atomic_write  # lazy: only a real submission writes

    path = _memory_file()
    try:
        try:
            known = json.loads(path.read_text())
            known = known if isinstance(known, dict) else {}
        except (OSError, ValueError):
            known = {}
        known[str(home.root)] = name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(known, indent=1) + "\n", durable=False)
    except OSError as exc:
        sys.stderr.write(f"warning: could not remember the last job in {path}: {exc.strerror}\n")
