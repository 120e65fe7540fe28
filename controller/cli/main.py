"""gflowctl entry point: argument parsing and dispatch. Verbs live in their own modules and are
imported only when used."""

from __future__ import annotations

import argparse
import sys

from controller.cli.common import EVERY_KIND, CliError, parse_refs, print_error, resource_type

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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 1, like every other user error
        raise CliError(message)


def build_parser() -> argparse.ArgumentParser:
    def instance_options(default):
        # accepted before and after the verb; SUPPRESS keeps a verb's default from hiding a value
        # given before it (gflowctl --home X get jobs)
        group = argparse.ArgumentParser(add_help=False)
        group.add_argument("--home", default=default, help="gflow home (default $GFLOW_HOME or ~/.local/share/gflow)")
        group.add_argument("--spec-dir", default=default, help="spec directory (default: the one gflowd watches, else HOME/jobs)")
        return group

    common = instance_options(argparse.SUPPRESS)

    parser = _Parser(
        prog="gflowctl",
        description="Look at and act on gflow jobs. Files are the API: manifests in, status files out.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[instance_options(None)],
    )
    parser.add_argument("--version", action="version", version=f"gflowctl {__import__('controller').__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)

    p = sub.add_parser("apply", parents=[common], help="create or update jobs from manifests")
    p.add_argument("-f", "--filename", action="append", required=True, help="file, folder or - for stdin")
    p.add_argument("-R", "--recursive", action="store_true", help="walk folders recursively")
    p.add_argument("--dry-run", action="store_true", help="validate and report, write nothing")

    p = sub.add_parser("run", add_help=False, help="submit a command or script in one line: run [flags] -- CMD (run -h)")
    p.add_argument("argv", nargs=argparse.REMAINDER)

    p = sub.add_parser("attach", parents=[common], help="connect this terminal to a running tty job (Ctrl-] detaches)")
    p.add_argument("name", metavar="NAME", help="a running job with spec.tty (gflowctl run -it makes one)")
    p.add_argument("--read-only", action="store_true", help="watch only; never type into the job")

    p = sub.add_parser("exec", parents=[common], help="run a command in a running job's allocation: exec NAME -- CMD")
    p.add_argument("name", metavar="NAME")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")

    p = sub.add_parser("get", parents=[common], help="list jobs, GPUs or events")
    p.add_argument("kind", help="jobs | sweeps | reservations | gpus (alias: node) | events")
    p.add_argument("names", nargs="*")
    p.add_argument("-o", "--output", choices=["wide", "yaml", "json", "name"])
    p.add_argument("-w", "--watch", action="store_true", help="keep watching for changes")
    p.add_argument("-l", "--selector", action="append", default=[], help="label selector key=value[,k2=v2]")
    p.add_argument("--phase", action="append", default=[], help="only jobs in this phase")
    p.add_argument("--tree", action="store_true", help="get jobs: dependencies and sweeps as a tree")
    p.add_argument("--for", dest="for_object", metavar="job/NAME", help="get events: only those of this job or sweep")

    p = sub.add_parser("describe", parents=[common], help="show jobs, sweeps or reservations in detail")
    p.add_argument("kind", help="job | sweep | reservation, or TYPE/NAME")
    p.add_argument("names", nargs="*", help="NAME... (or TYPE/NAME...)")

    p = sub.add_parser("delete", parents=[common], help="delete jobs, sweeps or reservations (their manifests)")
    p.add_argument("kind", nargs="?", help="job | sweep | reservation, or TYPE/NAME")
    p.add_argument("names", nargs="*")
    p.add_argument("-f", "--filename", action="append", default=[], help="delete the jobs this file defines")

    p = sub.add_parser("logs", parents=[common], help="print a job's output")
    p.add_argument("name", nargs="+", metavar="NAME", help="one job: NAME or job/NAME")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new output, across attempts")
    p.add_argument("--tail", type=int, default=None, help="only the last N lines")
    p.add_argument("--attempt", type=int, default=None, help="an earlier attempt's log")

    for verb, what in (("cancel", "stop jobs for good"), ("suspend", "hold jobs (stop if running)"),
                       ("resume", "release suspended jobs"), ("rerun", "run finished jobs again")):
        p = sub.add_parser(verb, parents=[common], help=what)
        p.add_argument("names", nargs="+", metavar="NAME", help="NAME, job/NAME or sweep/NAME, several at once")

    p = sub.add_parser("set", parents=[common], help="set a field: set priority NAME N")
    p.add_argument("field", choices=["priority"])
    p.add_argument("name", help="NAME, job/NAME or sweep/NAME")
    p.add_argument("value")

    p = sub.add_parser("patch", parents=[common], help="edit a job's manifest with a JSON merge patch")
    p.add_argument("kind", help="job, or job/NAME")
    p.add_argument("name", nargs="?")
    p.add_argument("-p", "--patch", required=True, help='JSON, e.g. \'{"spec": {"priority": 5}}\'')

    p = sub.add_parser("wait", parents=[common], help="wait until a job reaches a phase or condition")
    p.add_argument("target", nargs="+", help="job/NAME or sweep/NAME (a bare NAME is a job); several: wait for all")
    p.add_argument("--for", dest="for_", required=True, help="phase=P or condition=C")
    p.add_argument("--timeout", default="30s", help="give up after this long (default 30s); exit 1")

    p = sub.add_parser("explain", parents=[common], help="document a manifest field")
    p.add_argument("path", help="job, job.spec, job.spec.resources.gpus, ...")

    p = sub.add_parser("stats", parents=[common], help="jobs, success rate, waits, runtimes and GPU-hours by user and label")
    p.add_argument("--since", default="7d", help="window: a duration like 24h or 7d, or all (default 7d)")
    p.add_argument("-l", "--selector", action="append", default=[], help="only jobs with these labels: k=v[,k2!=v2]")
    p.add_argument("-o", "--output", choices=["json"])

    p = sub.add_parser("top", parents=[common], help="running jobs live: GPUs with util and memory, CPU, RSS, elapsed")
    p.add_argument("--once", action="store_true", help="print once and exit (also when stdout is not a terminal)")
    p.add_argument("--interval", default="2s", help="seconds between redraws (default 2s)")
    p.add_argument("-l", "--selector", action="append", default=[], help="only jobs with these labels: k=v[,k2!=v2]")

    p = sub.add_parser("completion", parents=[common], help="print a shell completion script: bash, zsh or fish")
    p.add_argument("shell", choices=["bash", "zsh", "fish"])

    p = sub.add_parser("export", parents=[common], help="print a job as an sbatch script or a Kubernetes Job")
    p.add_argument("target", choices=["slurm", "k8s"])
    p.add_argument("name", nargs="?", help="a job or sweep: NAME or TYPE/NAME (else every document of -f)")
    p.add_argument("-f", "--filename", action="append", default=[],
                   help="file, folder or - for stdin, instead of a job the controller knows")
    p.add_argument("-R", "--recursive", action="store_true", help="walk folders recursively")
    p.add_argument("--image", help="k8s: the container image (default: config k8s.image)")
    p.add_argument("--queue", help="k8s: the Kueue LocalQueue (label kueue.x-k8s.io/queue-name)")
    p.add_argument("--namespace", help="k8s: metadata.namespace")
    p.add_argument("--partition", help="slurm: --partition")
    p.add_argument("--account", help="slurm: --account")
    p.add_argument("--gpu-types", metavar="GPUTYPE=GRESTYPE,...",
                   help="slurm: the cluster's GRES type for each gpuType (default: config slurm.gpuTypes)")
    p.add_argument("--output", help="slurm: --output (default %%x-%%j.log, arrays %%x-%%A_%%a.log)")

    p = sub.add_parser("simulate", help="replay a job trace through the real scheduler on a virtual clock")
    p.add_argument("--trace", required=True, help="CSV: submit_s,gpus,duration_s,time_limit_s,priority,user")
    p.add_argument("--gpus", type=int, required=True, help="GPUs of the simulated machine")
    p.add_argument("--cpus", type=int, help="CPU cores of the simulated machine, booked by the trace's cpus column (default: not booked)")
    p.add_argument("--policy", default="default", help="fifo|priority|firstfit|backfill|default, or several comma-separated")
    p.add_argument("--config", help="simulate the policy of this config.yaml (as policy 'config')")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.add_argument("--plot", metavar="DIR", help="write a Gantt chart and a wait-time CDF (PNG) here; needs matplotlib")
    p.add_argument("--reservations", metavar="FILE", help="CSV: start_s,duration_s,devices,users (GPUs held for users)")

    p = sub.add_parser("mcp", parents=[common], help="serve gflow to AI agents: an MCP server on stdio (needs gflow-controller[mcp])")
    p.add_argument("--read-only", action="store_true", help="offer only the reading tools (no submit, cancel, ...)")

    sub.add_parser("version", parents=[common], help="print the version")
    return parser


def run(argv: list[str]) -> int:
    if argv[:1] == ["__complete"]:  # names for the completion scripts: not a verb users see
        from controller.cli.completion import complete_names  # lazy: gflowctl loads only the verb it runs

        return complete_names(argv[1:])
    position = _verb_position(argv)
    if position is not None and argv[position] == "run":  # its own flag parser: directives use it too
        from controller.cli.run import run_verb  # lazy: gflowctl loads only the verb it runs

        instance = build_parser().parse_args(argv[:position])
        return run_verb(argv[position + 1 :], instance.home, instance.spec_dir)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 0
    if args.verb == "simulate":  # needs no gflow home
        from controller.cli.simulate import simulate  # lazy: gflowctl loads only the verb it runs

        return simulate(args)
    from controller.cli.common import resolve_home  # lazy: only verbs that use a home resolve it

    home = resolve_home(args.home, args.spec_dir)
    verb = args.verb
    if verb == "version":
        print(f"gflowctl {__import__('controller').__version__}")
        return 0
    if verb == "apply":
        from controller.cli.apply import apply  # lazy: gflowctl loads only the verb it runs

        return apply(home, args.filename, args.recursive, args.dry_run)
    if verb == "get":
        from controller.cli.get import get  # lazy: gflowctl loads only the verb it runs

        return get(home, args)
    if verb == "describe":
        refs = parse_refs([args.kind, *args.names], type_first=True, kinds=EVERY_KIND)
        if not refs:
            raise CliError(f"name what to describe: gflowctl describe {args.kind} NAME...")
        from controller.cli.describe import describe  # lazy: gflowctl loads only the verb it runs

        return describe(home, refs)
    if verb == "delete":
        from controller.cli.apply import delete  # lazy: gflowctl loads only the verb it runs

        words = [args.kind, *args.names] if args.kind is not None else []
        # `delete -f FILE NAME...`: bare names beside -f are jobs, no type word needed
        type_first = not (args.filename and words and "/" not in words[0] and resource_type(words[0]) is None)
        return delete(home, parse_refs(words, type_first=type_first, kinds=EVERY_KIND), args.filename)
    if verb == "logs":
        from controller.cli.logs import logs  # lazy: gflowctl loads only the verb it runs

        return logs(home, _one_job(parse_refs(args.name), "logs prints one job's output"), args.follow, args.tail, args.attempt)
    if verb in ("cancel", "suspend", "resume", "rerun"):
        from controller.cli.edit import control  # lazy: gflowctl loads only the verb it runs

        return control(home, verb, parse_refs(args.names))
    if verb == "set":
        from controller.cli.edit import set_priority  # lazy: gflowctl loads only the verb it runs

        return set_priority(home, parse_refs([args.name])[0], args.value)
    if verb == "patch":
        refs = parse_refs([args.kind, *([args.name] if args.name else [])], type_first=True, kinds=("job",))
        from controller.cli.edit import patch  # lazy: gflowctl loads only the verb it runs

        return patch(home, _one_job(refs, "patch edits one job"), args.patch)
    if verb == "wait":
        from controller.cli.wait import wait  # lazy: gflowctl loads only the verb it runs

        return wait(home, parse_refs(args.target), args.for_, args.timeout)
    if verb in ("attach", "exec"):
        from controller.cli.attach import attach_verb, exec_verb  # lazy: gflowctl loads only the verb it runs

        name = _one_job(parse_refs([args.name]), f"{verb} takes one job")
        if verb == "attach":
            return attach_verb(home, name, args.read_only)
        return exec_verb(home, name, args.argv[1:] if args.argv[:1] == ["--"] else args.argv)
    if verb == "completion":
        from controller.cli.completion import completion  # lazy: gflowctl loads only the verb it runs

        return completion(parser, args.shell)
    if verb == "stats":
        from controller.cli.stats import stats  # lazy: gflowctl loads only the verb it runs

        return stats(home, args.since, args.selector, args.output)

    if verb == "top":
        from controller.cli.top import top  # lazy: gflowctl loads only the verb it runs

        return top(home, args.once, args.interval, args.selector)

    if verb == "export":
        from controller.cli.export import export  # lazy: gflowctl loads only the verb it runs

        options = {k: getattr(args, k) for k in ("image", "queue", "namespace", "partition", "account", "gpu_types", "output")}
        name = parse_refs([args.name])[0][1] if args.name else None
        return export(home, args.target, name, args.filename, options, args.recursive)
    if verb == "mcp":
        from controller.cli.mcp import serve  # lazy: gflowctl loads only the verb it runs

        return serve(home, args.read_only)
    if verb == "explain":
        from controller.cli.explain import explain  # lazy: gflowctl loads only the verb it runs

        return explain(args.path)
    raise CliError(f"unknown verb {verb!r}")


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
    if not refs:
        raise CliError(f"{what}: name it, NAME or job/NAME")
    if len(refs) > 1:
        named = " ".join(f"{kind}/{name}" for kind, name in refs)
        raise CliError(f"{what}, not {len(refs)} ({named}); run it once per job, e.g. xargs -n1")
    kind, name = refs[0]
    if kind != "job":
        raise CliError(f"{what}; {kind}/{name} is a sweep: its jobs are listed by gflowctl describe {kind}/{name}")
    return name


def main(argv: list[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except CliError as exc:
        print_error(exc)
        return 1
    except PermissionError as exc:  # e.g. another user's manifest in a shared, sticky spec dir
        where = exc.filename2 or exc.filename or ""
        print_error(f"{where}: permission denied (only its owner or root may change it)")
        return 1
    except ValueError as exc:  # paths.UnsafeName: a name that would leave the state directory
        if type(exc).__name__ != "UnsafeName":
            raise
        print_error(exc)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gflowctl get jobs | head`
        return 0
    except OSError as exc:  # the machine failing (a full disk, a read-only home): one line, no traceback
        where = exc.filename2 or exc.filename
        print_error(f"{where}: {exc.strerror}" if where and exc.strerror else f"{exc.strerror or exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
