"""gflowctl entry point: a table of verbs, argument parsing and dispatch. Start-up is most of what
a quick verb costs, so ``gflowctl``, ``--help``, ``version`` and ``--version`` answer from static
data (no argparse, no pathlib), and any other verb builds only its own parser and imports only its
own module. A new verb is one line in ``VERBS`` plus its arguments and its call below."""

from __future__ import annotations

import os  # already loaded by the interpreter
import sys

import controller

TYPE_CHECKING = False  # not typing's: gflowctl's start-up never imports typing (type checkers read it as theirs)
if TYPE_CHECKING:
    from typing import NoReturn

DESCRIPTION = "Look at and act on gflow jobs. Files are the API: manifests in, status files out."
EPILOG = """examples:
  gflowctl run --gpus 1 -- python3 train.py   submit a command in one line (or: run train.sh)
  gflowctl apply -f train.yaml          create or update jobs from a file, folder (-R) or - (stdin)
  gflowctl get jobs -o wide             list jobs; -l team=vision, --phase Pending, -w to watch
  gflowctl describe job train           status, conditions and recent events of one job
  gflowctl get jobs -o name | xargs gflowctl describe    every job in detail (TYPE/NAME works anywhere)
  gflowctl logs train -f                follow a job's output
  gflowctl run -it --gpus 1             a shell on a GPU, once one is free (Ctrl-] detaches)
  gflowctl attach dbg / exec train -- nvidia-smi    a terminal on a running job / a command beside it
  gflowctl cancel train                 edit the manifest: spec.cancelled: true
  gflowctl wait job/train --for=phase=Succeeded --timeout 10m
"""
INSTANCE_OPTIONS = (
    ("--home HOME", "gflow home (default $GFLOW_HOME or ~/.local/share/gflow)"),
    ("--spec-dir SPEC_DIR", "spec directory (default: the one gflowd watches, else HOME/jobs)"),
)


def _version(home, args) -> int:
    print(f"gflowctl {controller.__version__}")
    return 0


def _apply_args(p) -> None:
    p.add_argument("-f", "--filename", action="append", required=True, help="file, folder or - for stdin")
    p.add_argument("-R", "--recursive", action="store_true", help="walk folders recursively")
    p.add_argument("--dry-run", action="store_true", help="validate and report, write nothing")


def _apply(home, args) -> int:
    from controller.cli.apply import apply  # lazy: gflowctl loads only the verb it runs

    return apply(home, args.filename, args.recursive, args.dry_run)


def _run_args(p) -> None:
    import argparse  # lazy: only when the parser is built (never for version and --help)

    p.add_argument("argv", nargs=argparse.REMAINDER)


def _get_args(p) -> None:
    p.add_argument("kind", help="jobs | sweeps | reservations | gpus (alias: node) | events")
    p.add_argument("names", nargs="*")
    p.add_argument("-o", "--output", choices=["wide", "yaml", "json", "name"])
    p.add_argument("-w", "--watch", action="store_true", help="keep watching for changes")
    p.add_argument("-l", "--selector", action="append", default=[], help="label selector key=value[,k2=v2]")
    p.add_argument("--phase", action="append", default=[], help="only jobs in these phases: Pending,Running (or PD,R)")
    p.add_argument("-u", "--user", action="append", default=[], help="get jobs: only this user's jobs (NAME[,NAME])")
    p.add_argument("--me", action="store_true", help="get jobs: only your jobs")
    p.add_argument("-A", "--all", action="store_true", help="get jobs: also those that ended more than a day ago")
    p.add_argument("--tree", action="store_true", help="get jobs: dependencies and sweeps as a tree")
    p.add_argument("--for", dest="for_object", metavar="job/NAME", help="get events: only those of this job or sweep")


def _get(home, args) -> int:
    from controller.cli.get import get  # lazy: gflowctl loads only the verb it runs

    return get(home, args)


def _describe_args(p) -> None:
    p.add_argument("kind", help="job | sweep | reservation, or TYPE/NAME")
    p.add_argument("names", nargs="*", help="NAME... (or TYPE/NAME...)")


def _describe(home, args) -> int:
    from controller.cli.common import EVERY_KIND, CliError, parse_refs  # lazy: version and --help need none

    refs = parse_refs([args.kind, *args.names], type_first=True, kinds=EVERY_KIND)
    if not refs:
        raise CliError(f"name what to describe: gflowctl describe {args.kind} NAME...")
    from controller.cli.describe import describe  # lazy: gflowctl loads only the verb it runs

    return describe(home, refs)


def _delete_args(p) -> None:
    p.add_argument("kind", nargs="?", help="job | sweep | reservation, or TYPE/NAME")
    p.add_argument("names", nargs="*")
    p.add_argument("-f", "--filename", action="append", default=[], help="delete the jobs this file defines")


def _delete(home, args) -> int:
    from controller.cli.apply import delete  # lazy: gflowctl loads only the verb it runs
    from controller.cli.common import EVERY_KIND, parse_refs, resource_type  # lazy: version and --help need none

    words = [args.kind, *args.names] if args.kind is not None else []
    # `delete -f FILE NAME...`: bare names beside -f are jobs, no type word needed
    type_first = not (args.filename and words and "/" not in words[0] and resource_type(words[0]) is None)
    return delete(home, parse_refs(words, type_first=type_first, kinds=EVERY_KIND), args.filename)


def _logs_args(p) -> None:
    p.add_argument("name", nargs="+", metavar="NAME", help="one job: NAME or job/NAME")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new output, across attempts")
    p.add_argument("--tail", type=int, default=None, help="only the last N lines")
    p.add_argument("--attempt", type=int, default=None, help="an earlier attempt's log")


def _logs(home, args) -> int:
    from controller.cli.common import parse_refs  # lazy: version and --help need it not
    from controller.cli.logs import logs  # lazy: gflowctl loads only the verb it runs

    return logs(
        home, _one_job(parse_refs(args.name), "logs prints one job's output"), args.follow, args.tail, args.attempt
    )


def _names_args(p) -> None:
    p.add_argument("names", nargs="+", metavar="NAME", help="NAME, job/NAME or sweep/NAME, several at once")


def _control(home, args) -> int:
    from controller.cli.common import parse_refs  # lazy: version and --help need it not
    from controller.cli.edit import control  # lazy: gflowctl loads only the verb it runs

    return control(home, args.verb, parse_refs(args.names))


def _set_args(p) -> None:
    p.add_argument("field", choices=["priority"])
    p.add_argument("name", help="NAME, job/NAME or sweep/NAME")
    p.add_argument("value")


def _set(home, args) -> int:
    from controller.cli.common import parse_refs  # lazy: version and --help need it not
    from controller.cli.edit import set_priority  # lazy: gflowctl loads only the verb it runs

    return set_priority(home, parse_refs([args.name])[0], args.value)


def _patch_args(p) -> None:
    p.add_argument("kind", help="job, or job/NAME")
    p.add_argument("name", nargs="?")
    p.add_argument("-p", "--patch", required=True, help='JSON, e.g. \'{"spec": {"priority": 5}}\'')


def _patch(home, args) -> int:
    from controller.cli.common import parse_refs  # lazy: version and --help need it not
    from controller.cli.edit import patch  # lazy: gflowctl loads only the verb it runs

    refs = parse_refs([args.kind, *([args.name] if args.name else [])], type_first=True, kinds=("job",))
    return patch(home, _one_job(refs, "patch edits one job"), args.patch)


def _triage_args(p) -> None:
    p.add_argument("name", nargs="+", metavar="NAME", help="one job: NAME or job/NAME")
    p.add_argument("--attempt", type=int, default=None, help="an earlier attempt (its log only)")


def _triage(home, args) -> int:
    from controller.cli.common import parse_refs  # lazy: version and --help need it not
    from controller.cli.triage import triage  # lazy: gflowctl loads only the verb it runs
    from controller.client.api import Client

    return triage(
        Client(home.root, home.spec_dir), _one_job(parse_refs(args.name), "triage explains one job"), args.attempt
    )


def _cordon_args(p) -> None:
    p.add_argument("gpus", nargs="+", metavar="gpu N", help="gpu 2, gpu/2 or gpu 0,1: the GPUs, by index")
    p.add_argument("--reason", default="", help="why, shown to users whose jobs wait or are drained")


def _cordon(home, args) -> int:
    from controller.cli.cordon import cordon  # lazy: gflowctl loads only the verb it runs

    return cordon(home, args.verb, args.gpus, getattr(args, "reason", ""))


def _checkpoint_args(p) -> None:
    p.add_argument("what", choices=["done"], help="done: the checkpoint the job was signalled for is written")
    p.add_argument("--path", help="where it is (shown by describe)")
    p.add_argument("--job", help="the job (default: $GFLOW_JOB_NAME, set inside a job)")


def _checkpoint(home, args) -> int:
    from controller.cli.checkpoint import checkpoint_done  # lazy: gflowctl loads only the verb it runs

    return checkpoint_done(home, args.path, args.job)


def _wait_args(p) -> None:
    p.add_argument("target", nargs="+", help="job/NAME or sweep/NAME (a bare NAME is a job); several: wait for all")
    p.add_argument("--for", dest="for_", required=True, help="phase=P or condition=C")
    p.add_argument("--timeout", default="30s", help="give up after this long (default 30s); exit 1")


def _wait(home, args) -> int:
    from controller.cli.common import parse_refs  # lazy: version and --help need it not
    from controller.cli.wait import wait  # lazy: gflowctl loads only the verb it runs

    return wait(home, parse_refs(args.target), args.for_, args.timeout)


def _explain_args(p) -> None:
    p.add_argument("path", help="job, job.spec, job.spec.resources.gpus, ...")


def _explain(home, args) -> int:
    from controller.cli.explain import explain  # lazy: gflowctl loads only the verb it runs

    return explain(args.path)


def _stats_args(p) -> None:
    p.add_argument("--since", default="7d", help="window: a duration like 24h or 7d, or all (default 7d)")
    p.add_argument("-l", "--selector", action="append", default=[], help="only jobs with these labels: k=v[,k2!=v2]")
    p.add_argument("-o", "--output", choices=["json"])


def _stats(home, args) -> int:
    from controller.cli.stats import stats  # lazy: gflowctl loads only the verb it runs

    return stats(home, args.since, args.selector, args.output)


def _top_args(p) -> None:
    p.add_argument("--once", action="store_true", help="print once and exit (also when stdout is not a terminal)")
    p.add_argument("--interval", default="2s", help="seconds between redraws (default 2s)")
    p.add_argument("-l", "--selector", action="append", default=[], help="only jobs with these labels: k=v[,k2!=v2]")


def _top(home, args) -> int:
    from controller.cli.top import top  # lazy: gflowctl loads only the verb it runs

    return top(home, args.once, args.interval, args.selector)


def _attach_args(p) -> None:
    p.add_argument("name", metavar="NAME", help="a running job with spec.tty (gflowctl run -it makes one)")
    p.add_argument("--read-only", action="store_true", help="watch only; never type into the job")


def _attach(home, args) -> int:
    from controller.cli.attach import attach_verb  # lazy: gflowctl loads only the verb it runs
    from controller.cli.common import parse_refs  # lazy: version and --help need it not

    return attach_verb(home, _one_job(parse_refs([args.name]), "attach takes one job"), args.read_only)


def _exec_args(p) -> None:
    import argparse  # lazy: only when the parser is built (never for version and --help)

    p.add_argument("name", metavar="NAME")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")


def _exec(home, args) -> int:
    from controller.cli.attach import exec_verb  # lazy: gflowctl loads only the verb it runs
    from controller.cli.common import parse_refs  # lazy: version and --help need it not

    name = _one_job(parse_refs([args.name]), "exec takes one job")
    return exec_verb(home, name, args.argv[1:] if args.argv[:1] == ["--"] else args.argv)


def _completion_args(p) -> None:
    p.add_argument("shell", choices=["bash", "zsh", "fish"])


def _completion(home, args) -> int:
    from controller.cli.completion import completion  # lazy: gflowctl loads only the verb it runs

    return completion(build_parser(), args.shell)


def _export_args(p) -> None:
    p.add_argument("target", choices=["slurm", "k8s"])
    p.add_argument("name", nargs="?", help="a job or sweep: NAME or TYPE/NAME (else every document of -f)")
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        default=[],
        help="file, folder or - for stdin, instead of a job the controller knows",
    )
    p.add_argument("-R", "--recursive", action="store_true", help="walk folders recursively")
    p.add_argument("--image", help="k8s: the container image (default: config k8s.image)")
    p.add_argument("--queue", help="k8s: the Kueue LocalQueue (label kueue.x-k8s.io/queue-name)")
    p.add_argument("--namespace", help="k8s: metadata.namespace")
    p.add_argument("--partition", help="slurm: --partition")
    p.add_argument("--account", help="slurm: --account")
    p.add_argument(
        "--gpu-types",
        metavar="GPUTYPE=GRESTYPE,...",
        help="slurm: the cluster's GRES type for each gpuType (default: config slurm.gpuTypes)",
    )
    p.add_argument("--output", help="slurm: --output (default %%x-%%j.log, arrays %%x-%%A_%%a.log)")
    p.add_argument(
        "--operator",
        action="store_true",
        help="slurm: the script is for a Slurm operator, who may lower a nice: priority P becomes --nice=-P",
    )


def _export(home, args) -> int:
    from controller.cli.common import parse_refs  # lazy: version and --help need it not
    from controller.cli.export import export  # lazy: gflowctl loads only the verb it runs

    options = {
        k: getattr(args, k)
        for k in ("image", "queue", "namespace", "partition", "account", "gpu_types", "output", "operator")
    }
    name = parse_refs([args.name])[0][1] if args.name else None
    return export(home, args.target, name, args.filename, options, args.recursive)


def _simulate_args(p) -> None:
    p.add_argument("--trace", required=True, help="CSV: submit_s,gpus,duration_s,time_limit_s,priority,user")
    machine = p.add_mutually_exclusive_group(required=True)
    machine.add_argument("--gpus", type=int, help="GPUs of the simulated machine, all alike")
    machine.add_argument(
        "--fake-gpus",
        metavar="FILE",
        help="the machine as a fake-GPU file describes it (names, memory, MIG instances as units; docs/mig.md)",
    )
    p.add_argument(
        "--policy", default="default", help="fifo|priority|firstfit|backfill|default, or several comma-separated"
    )
    p.add_argument("--config", help="simulate the policy of this config.yaml (as policy 'config')")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.add_argument("--plot", metavar="DIR", help="write a Gantt chart and a wait-time CDF (PNG) here; needs matplotlib")
    p.add_argument(
        "--cpus",
        type=int,
        help="CPU cores of the simulated machine, booked by the trace's cpus column (default: not booked)",
    )
    p.add_argument("--reservations", metavar="FILE", help="CSV: start_s,duration_s,devices,users (GPUs held for users)")


def _simulate(home, args) -> int:
    from controller.cli.simulate import simulate  # lazy: gflowctl loads only the verb it runs

    return simulate(args)


def _mcp_args(p) -> None:
    p.add_argument("--read-only", action="store_true", help="offer only the reading tools (no submit, cancel, ...)")


def _mcp(home, args) -> int:
    from controller.cli.mcp import serve  # lazy: gflowctl loads only the verb it runs

    return serve(home, args.read_only)


# verb -> (help line, declare its arguments, run it as call(home, args)); in --help order.
# `run` is None here: it parses its own flags (directives use the same parser), see run() below.
# home=False: the verb needs no gflow home (nothing is resolved).
VERBS: dict[str, tuple] = {
    "apply": ("create or update jobs from manifests", _apply_args, _apply),
    "run": ("submit a command or script in one line: run [flags] -- CMD (run -h)", _run_args, None),
    "get": ("list jobs, GPUs or events", _get_args, _get),
    "describe": ("show jobs, sweeps or reservations in detail", _describe_args, _describe),
    "delete": ("delete jobs, sweeps or reservations (their manifests)", _delete_args, _delete),
    "logs": ("print a job's output", _logs_args, _logs),
    "triage": ("why a job failed: the cause, the fix and the evidence", _triage_args, _triage),
    "attach": ("connect this terminal to a running tty job (Ctrl-] detaches)", _attach_args, _attach),
    "exec": ("run a command in a running job's allocation: exec NAME -- CMD", _exec_args, _exec),
    "cancel": ("stop jobs for good", _names_args, _control),
    "suspend": ("hold jobs (stop if running)", _names_args, _control),
    "resume": ("release suspended jobs", _names_args, _control),
    "rerun": ("run finished jobs again", _names_args, _control),
    "set": ("set a field: set priority NAME N", _set_args, _set),
    "patch": ("edit a job's manifest with a JSON merge patch", _patch_args, _patch),
    "wait": ("wait until a job reaches a phase or condition", _wait_args, _wait),
    "cordon": ("admins: no new jobs on these GPUs: cordon gpu N", _cordon_args, _cordon),
    "drain": ("admins: cordon GPUs and return their jobs to Pending", _cordon_args, _cordon),
    "uncordon": ("admins: schedule on these GPUs again", _cordon_args, _cordon),
    "checkpoint": (
        "from inside a job: checkpoint done [--path P] confirms its checkpoint",
        _checkpoint_args,
        _checkpoint,
    ),
    "explain": ("document a manifest field", _explain_args, _explain),
    "stats": ("jobs, success rate, waits, runtimes and GPU-hours by user and label", _stats_args, _stats),
    "top": ("running jobs live: GPUs with util and memory, CPU, RSS, elapsed", _top_args, _top),
    "completion": ("print a shell completion script: bash, zsh or fish", _completion_args, _completion),
    "export": ("print a job as an sbatch script or a Kubernetes Job", _export_args, _export),
    "simulate": ("replay a job trace through the real scheduler on a virtual clock", _simulate_args, _simulate),
    "mcp": ("serve gflow to AI agents: an MCP server on stdio (needs gflow-controller[mcp])", _mcp_args, _mcp),
    "version": ("print the version", None, _version),
}
NO_HOME = {"simulate"}  # verbs that need no gflow home: nothing is resolved for them
NO_INSTANCE_OPTIONS = {"run", "simulate"}  # run: its own parser; simulate: reads only its flags


def help_text() -> str:
    """``gflowctl --help``, from the table above: no parser is built for it."""
    width = max(len(verb) for verb in VERBS) + 2
    verbs = "".join(f"    {verb.ljust(width)}{what}\n" for verb, (what, _, _) in VERBS.items())
    options = "".join(f"  {flag.ljust(22)}{what}\n" for flag, what in INSTANCE_OPTIONS)
    return (
        "usage: gflowctl [-h] [--home HOME] [--spec-dir SPEC_DIR] [--version] VERB ...\n\n"
        f"{DESCRIPTION}\n\npositional arguments:\n  VERB\n{verbs}\n"
        f"options:\n  {'-h, --help'.ljust(22)}show this help message and exit\n{options}"
        f"  {'--version'.ljust(22)}show program's version number and exit\n\n{EPILOG}"
    )


def build_parser(only: str | None = None):
    """gflowctl's argparse parser: every verb (completion scripts use it), or just ``only``."""
    import argparse  # lazy: never for version and --help

    from controller.cli.common import CliError  # lazy: version and --help need it not

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:  # one line, exit 1, like every other user error
            raise CliError(message)

    def instance_options(default):
        # accepted before and after the verb; SUPPRESS keeps a verb's default from hiding a value
        # given before it (gflowctl --home X get jobs)
        group = argparse.ArgumentParser(add_help=False)
        for flag, what in INSTANCE_OPTIONS:
            group.add_argument(flag.split()[0], default=default, help=what)
        return group

    common = instance_options(argparse.SUPPRESS)
    parser = _Parser(
        prog="gflowctl",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[instance_options(None)],
    )
    parser.add_argument("--version", action="version", version=f"gflowctl {controller.__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for verb, (what, arguments, _) in VERBS.items():
        if only is not None and verb != only:
            continue
        parents = [] if verb in NO_INSTANCE_OPTIONS else [common]
        p = sub.add_parser(verb, parents=parents, help=what, add_help=verb != "run")
        if arguments is not None:
            arguments(p)
    return parser


def run(argv: list[str]) -> int:
    if argv[:1] == ["__complete"]:  # names for the completion scripts: not a verb users see
        from controller.cli.completion import complete_names  # lazy: gflowctl loads only the verb it runs

        return complete_names(argv[1:])
    position = _verb_position(argv)
    verb = argv[position] if position is not None else None
    if verb == "run" and position is not None:  # its own flag parser: directives use it too
        from controller.cli.run import run_verb  # lazy: gflowctl loads only the verb it runs

        instance = _instance_options(argv[:position])
        if instance is None:  # something argparse words better (--home without a value)
            parsed = build_parser("run").parse_args(argv[:position])
            instance = parsed.home, parsed.spec_dir
        return run_verb(argv[position + 1 :], *instance)
    if verb == "apply" and position is not None and (plain := _plain_apply(argv, position)) is not None:
        from controller.cli.common import resolve_home  # lazy: only verbs that use a home resolve it

        home_arg, spec_dir_arg, args = plain
        return _apply(resolve_home(home_arg, spec_dir_arg, lean=True), args)
    if verb == "get" and position is not None and (plain := _plain_get(argv, position)) is not None:
        from controller.cli.get_table import quick_get_jobs  # lazy: gflowctl loads only the verb it runs

        home_arg, spec_dir_arg, args = plain
        answered = quick_get_jobs(home_arg, args)  # the table without a Home (pathlib): most get jobs
        if answered is not None:
            return answered
        from controller.cli.common import resolve_home  # lazy: as for apply

        return _get(resolve_home(home_arg, spec_dir_arg), args)
    parser = build_parser(verb if verb in VERBS else None)
    args, extra = parser.parse_known_args(argv)
    stray = [word for word in extra if word.startswith("-") or not hasattr(args, "names")]
    if stray:
        parser.parse_args(argv)  # argparse's own one-line error for what no verb takes
    if extra:  # names after flags (get jobs -o wide NAME), as kubectl takes them
        args.names = [*args.names, *extra]
    if args.verb is None:
        sys.stdout.write(help_text())
        return 0
    home = None
    if args.verb not in NO_HOME:
        from controller.cli.common import resolve_home  # lazy: only verbs that use a home resolve it

        home = resolve_home(args.home, args.spec_dir)
    return VERBS[args.verb][2](home, args)


def _answer_at_once(argv: list[str]) -> bool:
    """``gflowctl``, ``--help``, ``version``, ``--version``: printed from static data."""
    if argv in ([], ["-h"], ["--help"]):
        sys.stdout.write(help_text())
    elif argv in (["--version"], ["version"]):
        _version(None, None)
    else:
        return False
    return True


def _instance_options(words: list[str]) -> tuple[str | None, str | None] | None:
    """(--home, --spec-dir) given before ``run``, read without argparse (~10 ms of run's start-up:
    argparse, gettext, locale, shutil); None when a value looks like a flag, for argparse's error."""
    given: dict[str, str | None] = {"--home": None, "--spec-dir": None}
    i = 0
    while i < len(words):
        flag, eq, value = words[i].partition("=")
        if not eq:
            i += 1
            value = words[i] if i < len(words) else ""
        if flag not in given or not value or (not eq and value.startswith("-")):
            return None
        given[flag] = value  # the last one wins, as with argparse
        i += 1
    return given["--home"], given["--spec-dir"]


def _plain_apply(argv: list[str], position: int):
    """``apply -f FILE... [-R] [--dry-run]`` written plainly (each flag whole, a value after its
    flag, ``-`` for stdin), read without argparse: what gflowctl apply costs is mostly start-up,
    and argparse with what it loads is ~5 ms of it. (home, spec dir, the arguments as argparse
    would give them), or None for anything else: argparse reads it, and words its errors."""
    from types import SimpleNamespace  # lazy: already loaded by the interpreter, only apply uses it

    instance = _instance_options(argv[:position])
    if instance is None:
        return None
    home, spec_dir = instance
    args = SimpleNamespace(filename=[], recursive=False, dry_run=False)
    words = argv[position + 1 :]
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("-R", "--recursive"):
            args.recursive = True
        elif word == "--dry-run":
            args.dry_run = True
        elif word in ("-f", "--filename", "--home", "--spec-dir") and i + 1 < len(words):
            i += 1
            value = words[i]
            if not value or (value.startswith("-") and value != "-"):
                return None
            if word in ("-f", "--filename"):
                args.filename.append(value)
            elif word == "--home":
                home = value
            else:
                spec_dir = value
        else:
            return None
        i += 1
    return (home, spec_dir, args) if args.filename else None


GET_FLAGS = {"-o": "output", "--output": "output", "-l": "selector", "--selector": "selector", "--phase": "phase"}
GET_FLAGS |= {"-u": "user", "--user": "user", "--for": "for_object"}
GET_SWITCHES = {"-w": "watch", "--watch": "watch", "--me": "me", "-A": "all", "--all": "all", "--tree": "tree"}
GET_OUTPUTS = ("wide", "yaml", "json", "name")


def _plain_get(argv: list[str], position: int):
    """``get KIND [NAME...]`` with its flags written plainly (each flag whole, its value the next
    word), read without argparse: ``get jobs`` at 1,000 jobs spent ~9 ms of its ~60 in argparse
    and what it loads (gettext, locale, shutil). (home, spec dir, the arguments as argparse would
    give them), or None for anything else: argparse reads it, and words its errors."""
    from types import SimpleNamespace  # lazy: already loaded by the interpreter

    instance = _instance_options(argv[:position])
    if instance is None:
        return None
    home, spec_dir = instance
    args = SimpleNamespace(verb="get", kind=None, names=[], output=None, for_object=None)
    args.__dict__.update(selector=[], phase=[], user=[], watch=False, me=False, all=False, tree=False)
    words = argv[position + 1 :]
    i = 0
    while i < len(words):
        word = words[i]
        if word in GET_SWITCHES:
            setattr(args, GET_SWITCHES[word], True)
        elif word in GET_FLAGS and i + 1 < len(words):
            i += 1
            value = words[i]
            if not value or value.startswith("-"):
                return None
            field = GET_FLAGS[word]
            if field == "output" and value not in GET_OUTPUTS:
                return None
            if field in ("selector", "phase", "user"):
                getattr(args, field).append(value)
            else:
                setattr(args, field, value)
        elif word in ("--home", "--spec-dir") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            i += 1
            home, spec_dir = (words[i], spec_dir) if word == "--home" else (home, words[i])
        elif word and not word.startswith("-"):
            if args.kind is None:
                args.kind = word
            else:
                args.names.append(word)
        else:
            return None
        i += 1
    return (home, spec_dir, args) if args.kind is not None else None


def _verb_position(argv: list[str]) -> int | None:
    """Where the verb is, after the instance options (--home X, --spec-dir=X) that may precede it."""
    i = 0
    while i < len(argv):
        if argv[i] in ("--home", "--spec-dir"):
            i += 2
        elif argv[i].startswith(("--home=", "--spec-dir=")):
            i += 1
        else:
            return i
    return None


def _one_job(refs: list[tuple[str, str]], what: str) -> str:
    """The single job a verb acts on; a sweep or several names is a clear error."""
    from controller.cli.common import CliError  # lazy: version and --help need it not

    if not refs:
        raise CliError(f"{what}: name it, NAME or job/NAME")
    if len(refs) > 1:
        named = " ".join(f"{kind}/{name}" for kind, name in refs)
        raise CliError(f"{what}, not {len(refs)} ({named}); run it once per job, e.g. xargs -n1")
    kind, name = refs[0]
    if kind != "job":
        raise CliError(f"{what}; {kind}/{name} is a sweep: its jobs are listed by gflowctl describe {kind}/{name}")
    return name


FAST_EXIT = ("run", "apply", "get")  # verbs whose process ends at once after main (see _exit_now)


def main(argv: list[str] | None = None) -> int:
    if argv is not None:  # called from Python (tests, scripts): an ordinary return
        return _main(argv)
    argv = sys.argv[1:]
    code = _main(argv)
    position = _verb_position(argv)
    if position is not None and argv[position] in FAST_EXIT:
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """End the process here, streams flushed: the interpreter's own teardown (each of ~100 modules'
    namespaces, the collector) is 3-6 ms of ``run``/``apply``/``get`` after their work is done,
    timed from main's return to the parent seeing the exit; the job is Running by then. Not
    when another thread runs (an ordinary exit joins it) or a stream will not flush (the ordinary
    exit words that). gflowctl registers no atexit hooks and closes every file it writes."""
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code if isinstance(code, int) else 1)


def _main(argv: list[str]) -> int:
    try:
        if _answer_at_once(argv):
            return 0
    except BrokenPipeError:  # `gflowctl --help | head`
        return 0
    from controller.client.errors import GflowError as CliError  # lazy: version and --help need none

    try:
        return run(argv)
    except CliError as exc:
        from controller.cli.common import print_error  # lazy: common loads Home (pathlib), get jobs does not

        print_error(exc)
        return 1
    except PermissionError as exc:  # e.g. another user's manifest in a shared, sticky spec dir
        from controller.cli.common import print_error  # lazy: as above

        where = exc.filename2 or exc.filename or ""
        may = "read" if argv[_verb_position(argv) or 0 :][:1] in (["logs"], ["describe"], ["get"]) else "change"
        print_error(f"{where}: permission denied (only its owner or root may {may} it)")
        return 1
    except ValueError as exc:  # paths.UnsafeName: a name that would leave the state directory
        if type(exc).__name__ != "UnsafeName":
            raise
        from controller.cli.common import print_error  # lazy: as above

        print_error(exc)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gflowctl get jobs | head`
        return 0
    except OSError as exc:  # the machine failing (a full disk, a read-only home): one line, no traceback
        from controller.cli.common import print_error  # lazy: as above

        where = exc.filename2 or exc.filename
        print_error(f"{where}: {exc.strerror}" if where and exc.strerror else f"{exc.strerror or exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
