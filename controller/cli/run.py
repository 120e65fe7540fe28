"""``gflowctl run [flags] -- CMD [ARGS...]`` and ``gflowctl run SCRIPT [ARGS...]``: submit in one line.

The I/O around ``controller.api.submit``: read the script and its directives, the current directory,
the last job this user submitted; then write a real manifest into the spec dir through apply's own
writer (checked by gflowd's admission when it runs, created only if no one created it meanwhile),
so get, describe, edit, cancel and git see an ordinary job. ``--wait`` and ``--follow`` then exit
with the job's exit code.
"""

from __future__ import annotations

import os
import pwd
import sys
import time

from controller.api.export import without_environment
from controller.api.submit import FLAGS, SubmitError, parse_flags, render
from controller.cli.common import CliError, print_error, printable, resolve_home
from controller.client.read.state import is_running, read_status
from controller.client.write.submit import (
    build_submission,
    check_names,
    check_program,
    check_submission,
    early_manifest,
    read_script,
    remember,
    store_submission,
)
from controller.paths import Home
from controller.util.lean_path import lean

TYPE_CHECKING = False  # not typing's: run's start-up is most of what it costs (docs/performance.md)
if TYPE_CHECKING:
    from typing import Any

USAGE = """usage: gflowctl run [flags] -- CMD [ARGS...]
       gflowctl run [flags] SCRIPT [ARGS...]

Submit a job in one line: writes a manifest into the spec dir and prints job/NAME created.
The job runs in the current directory (--workdir to change). A SCRIPT is pinned: its text is
copied into the manifest, so editing the file later changes no queued job. Its leading comment
block may hold '# GFLOW --gpus 1' and '#SBATCH --gres=gpu:1' lines; flags override them.

flags:
"""

TERMINAL = {"Succeeded", "Failed", "Cancelled", "Rejected"}


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
    home = resolve_home(options.pop("home", home_arg), options.pop("spec_dir", spec_dir_arg), lean=True)
    cli: dict[str, Any] = {k: options.pop(k) for k in ("dry_run", "output", "quiet", "wait", "follow") if k in options}
    cli["interactive"] = bool(options.get("interactive"))  # kept in options too: build sets spec.tty
    if cli["interactive"] and (cli.get("wait") or cli.get("follow")):
        raise CliError("-it attaches to the job already: drop --wait/--follow")
    if cli["interactive"] and not rest:
        rest, after_dashes = [login_shell()], True
    if cli["interactive"] and os.environ.get("TERM") and not any(e.startswith("TERM=") for e in options.get("env", [])):
        options["env"] = [*options.get("env", []), f"TERM={os.environ['TERM']}"]  # the job draws for this terminal
    if cli.get("output") not in (None, "yaml", "name"):
        raise CliError(f"-o {cli['output']}: use -o yaml (with --dry-run) or -o name")
    if not rest:
        raise CliError("nothing to run: gflowctl run [flags] -- CMD [ARGS...] or gflowctl run SCRIPT")
    script = None if after_dashes else read_script(lean(rest[0]))
    submission = build_submission(
        home,
        options,
        command=rest if after_dashes else None,
        script=script,
        script_args=rest[1:] if script is not None else None,
        cwd=os.getcwd(),
    )
    for warning in script.warnings if script is not None else []:
        sys.stderr.write(f"warning: {warning}\n")
    check_names(home, submission)
    if not options.get("no_check"):
        check_program(submission, script, rest[1:])
    text = render(submission.manifest)
    if cli.get("dry_run") and cli.get("output") == "yaml":
        text = render(without_environment(submission.manifest))
    return _submit(
        home,
        submission.kind,
        submission.name,
        text,
        cli,
        source=str(script.path) if script is not None else None,
        environment=submission.environment,
    )


def _submit(
    home: Home,
    kind: str,
    name: str,
    text: str,
    cli: dict,
    source: str | None = None,
    environment: dict[str, str] | None = None,
) -> int:
    dry_run = bool(cli.get("dry_run"))
    early = None if dry_run else early_manifest(home, name, text, source)  # written while gflowd reviews it
    try:
        doc, errors = check_submission(home, text, early)
        if doc is None:
            for error in errors:
                print_error(error)
            return 1
        if cli.get("interactive") and doc.warning and not dry_run:  # srun refuses at once: nobody waits forever
            raise CliError(f"{doc.warning}; not submitted (ask for what this machine has)")
        if dry_run and cli.get("output") == "yaml":
            sys.stdout.write(text)
            return 0
        verb = store_submission(home, doc, dry_run, source=source, environment=environment, early=early)
    finally:
        if early is not None:
            early.abandon()
    if cli.get("quiet") or cli.get("output") == "name":
        print(name if cli.get("quiet") else f"{kind}/{name}", flush=True)
    else:
        print(f"{kind}/{name} {verb}" + (" (dry run)" if dry_run else ""), flush=True)
    if doc.warning:  # gflowd's review: it can never start here (still created: see apply)
        sys.stderr.write(f"warning: {printable(doc.warning)}\n")
    if dry_run:
        return 0
    trouble = remember(home, name)
    if trouble:
        sys.stderr.write(f"warning: {trouble}\n")
    if not is_running(home):
        sys.stderr.write(f"warning: gflowd is not running for {home.root}; the job starts when it runs\n")
    if cli.get("interactive"):
        return _interactive(home, name)
    if not (cli.get("wait") or cli.get("follow")):
        return 0
    if kind != "job":
        raise CliError(
            f"--wait and --follow take one job; see the sweep's children with gflowctl get jobs -l gflow.dev/sweep={name}"
        )
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
                print_error(
                    f"job/{name} {phase}: {status.get('reason')}"
                    + (f": {status['message']}" if status.get("message") else "")
                )
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
        return 1 if status.get("reason") == "Unschedulable" else _exit_code(home, name)
    if sys.stdin.isatty():  # what was typed while it waited is not for the new shell: drop it
        import termios  # lazy: only run -it on a terminal

        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
    devices = ",".join(str(d) for d in status.get("devices") or [])
    sys.stderr.write(f"job/{name} is running ({f'GPUs {devices}' if devices else 'no GPU'}); Ctrl-] detaches\r\n")
    ended, code = session(sock, name)
    if not ended:
        return 0
    return code if code is not None else _exit_code(home, name)


def _wait_for_session(home: Home, name: str):
    """(a connection to the job's terminal, its status) once it runs; (None, status) if it ended first."""
    from controller.cli.attach import job_owner  # lazy: only run -it attaches
    from controller.client.control_peer import NotSupervisor, open_control
    from controller.client.terminal import NoSession

    line = _StatusLine(sys.stderr)
    try:
        while True:
            status = (read_status(home, name) or {}).get("status") or {}
            phase = status.get("phase")
            if phase in TERMINAL:
                return None, status
            if status.get("reason") == "Unschedulable":  # never fits: srun would not have queued it
                line.clear()
                from controller.cli.edit import control  # lazy: only a session that cannot start

                print_error(f"job/{name} can never start here: {status.get('message')}; cancelling it")
                control(home, "cancel", [("job", name)])
                return None, {"phase": "Cancelled", "reason": "Unschedulable"}
            uid = job_owner(home, name)
            if phase == "Running" and uid is not None:
                try:
                    return open_control(home, uid, name), status
                except NoSession:
                    pass  # its supervisor is just starting
                except NotSupervisor as exc:
                    raise CliError(printable(str(exc))) from None
            elif phase:
                line.show(_waiting(name, status))
            else:
                line.show(
                    f"job/{name}: waiting for gflowd to take it in"
                    + ("" if is_running(home) else " (no gflowd runs for this home)")
                )
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
