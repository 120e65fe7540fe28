"""``gflowctl run``'s pure part: flags and script directives in, a manifest (dict and text) out.

No I/O: the CLI verb (``controller.cli.run``) reads the script, the current directory, the last job
submitted and the clock's random suffix, and passes them in. The same flag table serves the command
line and ``# GFLOW`` directive lines; ``#SBATCH`` lines are translated into the same options (the
common subset, see docs/cheatsheet.md), and anything else in them gets a warning naming it.

A script is pinned: its text is copied into ``spec.script`` (written to a temporary file and run
there, by its own ``#!`` interpreter), so editing the file after submission does not change a
queued job, as with sbatch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from controller import API_VERSION
from controller.api.export import ENV_ANNOTATION, ENV_FILE, ExportError, exported_env
from controller.api.names import is_valid_name
from controller.api.signals import CHECKPOINT_SIGNALS
from controller.api.units import format_duration, parse_duration, parse_quantity
from controller.model.mig import mig_profile_ok
from controller.util.yamlio import dump

TYPE_CHECKING = False  # not typing's: run's start-up imports neither typing nor dataclasses (~10 ms)
if TYPE_CHECKING:
    from typing import Any


class SubmitError(ValueError):
    """Bad input to ``run``: one line naming what to fix."""


class Flag:
    """One of run's flags. (Its classes are plain, not dataclasses: see TYPE_CHECKING above.)"""

    __slots__ = ("cli_only", "dest", "help", "names", "repeatable", "takes_value")

    def __init__(
        self,
        names: tuple[str, ...],
        dest: str,
        takes_value: bool = True,
        repeatable: bool = False,
        cli_only: bool = False,  # not allowed in a ``# GFLOW`` directive (it says how to submit, not what)
        help: str = "",
    ) -> None:
        self.names, self.dest, self.takes_value = names, dest, takes_value
        self.repeatable, self.cli_only, self.help = repeatable, cli_only, help


FLAGS: tuple[Flag, ...] = (
    Flag(
        ("--name", "--job-name", "-J"),
        "name",
        help="job name (default: the script or program name plus a short suffix)",
    ),
    Flag(("--gpus", "-G"), "gpus", help="whole GPUs (resources.gpus)"),
    Flag(("--gres",), "gres", help="gpu:N or gpu:TYPE:N, as sbatch writes it (--gpus N --gpu-type TYPE)"),
    Flag(("--cpus", "--cpus-per-task", "-c"), "cpus", help="whole CPU cores, pinned near the GPUs (resources.cpus)"),
    Flag(("--gpu-type",), "gpu_type", help="only GPUs whose name contains this, or amd / nvidia (resources.gpuType)"),
    Flag(("--shared",), "shared", takes_value=False, help="share GPUs with other Shared jobs (needs --gpu-memory)"),
    Flag(("--gpu-memory",), "gpu_memory", help="GPU memory per GPU, e.g. 20Gi (resources.gpuMemory)"),
    Flag(("--memory", "--mem"), "memory", help="host RAM limit, e.g. 16Gi; a bare number is MiB as in sbatch"),
    Flag(("--time", "-t"), "time", help="time limit: 4h30m, or Slurm's MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]"),
    Flag(
        ("--signal",),
        "signal",
        help="[B:]SIG[@SECONDS], as sbatch: a checkpoint signal SECONDS (default 60) before the time limit and "
        "before any stop gflowd causes (spec.checkpoint; B: to the main process only, else to all)",
    ),
    Flag(("--priority",), "priority", help="integer, higher runs first"),
    Flag(
        ("--after", "--depends-on"), "after", repeatable=True, help="JOB[:Succeeded|Failed|Finished]; @ = your last job"
    ),
    Flag(("--start-after",), "start_after", help="not before: 2026-12-01T22:00:00 or +2h"),
    Flag(("--env", "-e"), "env", repeatable=True, help="K=V environment variable"),
    Flag(("--conda-env",), "conda_env", help="run inside this conda environment"),
    Flag(("--export",), "export", help="ALL (default: your environment), NONE, VAR,... or ALL,VAR=value (as sbatch)"),
    Flag(("--retries",), "retries", help="retries after a failed attempt (spec.backoffLimit)"),
    Flag(("--label", "-l"), "label", repeatable=True, help="k=v[,k2=v2] labels"),
    Flag(("--workdir", "--chdir", "-D"), "workdir", help="working directory (default: the current one)"),
    Flag(("--param",), "param", repeatable=True, help="KEY=V1,V2,...: a sweep over the cartesian product"),
    Flag(("--array",), "array", help="0-9 or 0-9%2: a job array (a Sweep over indices, %N = parallelism)"),
    Flag(("--max-concurrent", "--parallelism"), "parallelism", help="a sweep: at most N children at once"),
    Flag(
        ("--no-check",),
        "no_check",
        takes_value=False,
        cli_only=True,
        help="skip the submit-time checks of the program (exists, executable, on the job's PATH)",
    ),
    Flag(
        ("--dry-run",), "dry_run", takes_value=False, cli_only=True, help="print what would be written; write nothing"
    ),
    Flag(("--output", "-o"), "output", cli_only=True, help="with --dry-run: yaml prints the manifest"),
    Flag(("--quiet", "-q"), "quiet", takes_value=False, cli_only=True, help="print only the name"),
    Flag(
        ("-it", "-ti", "--interactive", "-i"),
        "interactive",
        takes_value=False,
        cli_only=True,
        help="a terminal session (spec.tty): wait for the job, then attach; default CMD your login shell",
    ),
    Flag(("--wait",), "wait", takes_value=False, cli_only=True, help="wait for the end; exit with the job's code"),
    Flag(
        ("--follow", "-f"), "follow", takes_value=False, cli_only=True, help="stream the log; exit with the job's code"
    ),
    Flag(("--home",), "home", cli_only=True, help="gflow home"),
    Flag(("--spec-dir",), "spec_dir", cli_only=True, help="spec directory"),
)
_BY_NAME = {name: flag for flag in FLAGS for name in flag.names}


def parse_flags(
    tokens: list[str], *, where: str = "", directive: bool = False
) -> tuple[dict[str, Any], list[str], bool]:
    """(options, the rest, whether ``--`` ended the flags). Flags stop at ``--`` or at the first
    word that is not a flag (the script or program). ``where`` prefixes errors (a directive's line)."""
    options: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            return options, tokens[i + 1 :], True
        if not token.startswith("-") or token == "-":
            return options, tokens[i:], False
        value: str | bool
        name, eq, value = token.partition("=")
        flag = _BY_NAME.get(name)
        if flag is None and not eq and len(name) > 2 and name[1] != "-" and name[:2] in _BY_NAME:
            flag, value, eq = _BY_NAME[name[:2]], name[2:], "="  # -G2, -lteam=x
        if flag is None:
            raise SubmitError(f"{where}unknown flag {name}; {_suggestion(name)}")
        if directive and flag.cli_only:
            raise SubmitError(f"{where}{name} is not allowed in a # GFLOW directive; give it on the command line")
        if flag.takes_value:
            if not eq:
                i += 1
                if i >= len(tokens):
                    raise SubmitError(f"{where}{name} needs a value")
                value = tokens[i]
        elif eq:
            raise SubmitError(f"{where}{name} takes no value")
        else:
            value = True
        if flag.repeatable:
            options.setdefault(flag.dest, []).append(value)
        else:
            options[flag.dest] = value
        i += 1
    return options, [], False


_HINTS = {  # other schedulers' flags with no one-to-one gflow flag: what to write instead
    "--dependency": "did you mean --after JOB[:Succeeded|Failed|Finished] (sbatch --dependency=afterok:JOB)?",
    "-d": "did you mean --after JOB (sbatch -d afterok:JOB)?",
    "--partition": "one machine has no partitions; drop it",
    "-p": "one machine has no partitions; drop it",
    "--ntasks": "a job is one process tree here; drop it (--cpus books cores)",
    "--nodes": "one machine: drop it",
}


def _suggestion(name: str) -> str:
    """The fix for an unknown flag: a hint for a known foreign one, else the nearest gflow flags."""
    if name in _HINTS:
        return _HINTS[name]
    from difflib import get_close_matches  # lazy: only a mistyped flag

    close = get_close_matches(name, [n for n in _BY_NAME if n.startswith("--")], n=2, cutoff=0.75)
    return f"did you mean {' or '.join(close)}? (gflowctl run --help)" if close else "see gflowctl run --help"


def merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """``high`` (the command line) overrides ``low`` (directives); repeated flags add up."""
    out = dict(low)
    for key, value in high.items():
        out[key] = out.get(key, []) + value if isinstance(value, list) else value
    return out


# -- directives ------------------------------------------------------------------------------------

_GFLOW_RE = r"^#\s*GFLOW\b\s?(.*)$"  # compiled on first use (re's cache): not at every gflowctl start
_SBATCH_RE = r"^#SBATCH\b\s?(.*)$"


class Directives:
    __slots__ = ("name_from_sbatch", "options", "warnings")

    def __init__(
        self,
        options: dict[str, Any] | None = None,  # with "sbatch_script": True after any #SBATCH line
        warnings: list[str] | None = None,
        name_from_sbatch: bool = False,
    ) -> None:
        self.options = {} if options is None else options
        self.warnings = [] if warnings is None else warnings
        self.name_from_sbatch = name_from_sbatch


def read_directives(text: str, origin: str) -> Directives:
    """``# GFLOW`` and ``#SBATCH`` lines of the leading comment block (after ``#!``, up to the first
    line that is neither blank nor a comment), as sbatch reads them. ``# GFLOW`` lines win over
    ``#SBATCH`` lines; an unknown ``#SBATCH`` option is a warning, an unknown ``# GFLOW`` flag an
    error (it is gflow's own language, a typo there should stop the submission)."""
    gflow: dict[str, Any] = {}
    sbatch: dict[str, Any] = {}
    import shlex  # lazy: only a script's directives need it, not run -- CMD

    warnings: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if number == 1 and stripped.startswith("#!"):
            continue
        if stripped and not stripped.startswith("#"):
            break
        where = f"{origin} line {number}: "
        try:
            words = None
            if match := re.match(_GFLOW_RE, stripped):
                words = shlex.split(match.group(1), comments=True)
                options, rest, _ = parse_flags(words, where=where, directive=True)
                if rest:
                    raise SubmitError(f"{where}unexpected {rest[0]!r} in a # GFLOW directive")
                gflow = merge(gflow, options)
            elif match := re.match(_SBATCH_RE, stripped):
                words = shlex.split(match.group(1), comments=True)
                sbatch = merge(sbatch, _sbatch_options(words, where, warnings))
                sbatch["sbatch_script"] = True  # a script written for Slurm: it gets the variables such scripts read
        except ValueError as exc:  # shlex: an unbalanced quote
            if isinstance(exc, SubmitError):
                raise
            raise SubmitError(f"{where}{exc}") from None
    return Directives(merge(sbatch, gflow), warnings, "name" in sbatch and "name" not in gflow)


_SBATCH_IGNORED = {  # accepted, but meaningless on one machine: a warning says so
    "--partition",
    "-p",
    "--account",
    "-A",
    "--nodes",
    "-N",
    "--ntasks",
    "-n",
    "--ntasks-per-node",
    "--mail-type",
    "--mail-user",
    "--qos",
    "-q",
    "--constraint",
    "-C",
    "--exclusive",
    "--requeue",
}


def _sbatch_options(words: list[str], where: str, warnings: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        name, eq, value = words[i].partition("=")
        if not eq and len(name) > 2 and name[0] == "-" and name[1] != "-":
            name, value, eq = name[:2], name[2:], "="  # -J name written -Jname
        takes_value = name not in ("--exclusive", "--requeue")
        if takes_value and not eq:
            i += 1
            value = words[i] if i < len(words) else ""
        i += 1
        if takes_value and not value:
            raise SubmitError(f"{where}#SBATCH {name} needs a value")
        if name in ("-J", "--job-name"):
            out["name"] = value
        elif name in ("--gres",):
            _sbatch_gres(value, out, where, warnings)
        elif name in ("--gpus", "-G"):
            out.update(gpus_option(value))
        elif name in ("--time", "-t"):
            out["time"] = value
        elif name == "--signal":
            out["signal"] = value
        elif name == "--mem":
            out["memory"] = value
        elif name in ("--dependency", "-d"):
            out["after"] = _sbatch_dependency(value, where, warnings)
        elif name in ("--array", "-a"):
            out["array"] = value
        elif name in ("--chdir", "-D"):
            out["workdir"] = value
        elif name in ("--output", "-o"):
            out["slurm_output"] = value
        elif name in ("--error", "-e"):
            out["slurm_error"] = value
        elif name in ("--cpus-per-task", "-c"):
            out["cpus"] = value
        elif name == "--export":
            out["export"] = value
        elif name in ("--begin", "-b"):
            out["start_after"] = value
        elif name in _SBATCH_IGNORED:
            warnings.append(f"{where}#SBATCH {name} is ignored on one machine")
        else:
            warnings.append(f"{where}#SBATCH {name} is not supported; ignored")
    return out


def _sbatch_gres(value: str, out: dict[str, Any], where: str, warnings: list[str]) -> None:
    for item in value.split(","):
        parts = item.split(":")
        if parts[0] != "gpu":
            warnings.append(f"{where}#SBATCH --gres={item} is not supported; ignored")
            continue
        if len(parts) == 1:
            out["gpus"] = "1"
        elif len(parts) == 2 and not parts[1].isdigit():  # gpu:1g.10gb: one of that type
            out["gpu_type"], out["gpus"] = parts[1], "1"
        elif len(parts) == 2:
            out["gpus"] = parts[1]
        else:
            out["gpu_type"], out["gpus"] = parts[1], parts[2]


def parse_gres(value: str) -> dict[str, str]:
    """``run --gres gpu:2`` or ``gpu:a100:2``: the --gpus and --gpu-type it stands for."""
    parts = value.split(":")
    if len(parts) == 2 and parts[0] == "gpu" and mig_profile_ok(parts[1]):  # gpu:1g.10gb: one instance
        return {"gpus": "1", "gpu_type": parts[1]}
    if parts[0] != "gpu" or len(parts) > 3 or (len(parts) > 1 and not parts[-1].isdigit()):
        raise SubmitError(f"--gres={value}: only GPUs, written gpu:N or gpu:TYPE:N (or use --gpus N)")
    if len(parts) == 1:
        return {"gpus": "1"}
    return {"gpus": parts[-1], **({"gpu_type": parts[1]} if len(parts) == 3 else {})}


def gpus_option(value: str) -> dict[str, str]:
    """``--gpus`` as sbatch and ``run`` take it: ``N``, ``TYPE:N``, a MIG profile alone
    (``1g.10gb``: one instance) or ``N:1g.10gb``; the count and type it stands for."""
    kind, _, number = value.rpartition(":")
    if mig_profile_ok(number) and (not kind or kind.isdigit()):
        kind, number = number, kind or "1"
    return {"gpus": number, **({"gpu_type": kind} if kind else {})}


_SLURM_CONDITIONS = {"afterok": "Succeeded", "afternotok": "Failed", "afterany": "Finished"}


def _sbatch_dependency(value: str, where: str, warnings: list[str]) -> list[str]:
    after: list[str] = []
    for item in re.split(r"[,?]", value):
        kind, _, names = item.partition(":")
        condition = _SLURM_CONDITIONS.get(kind)
        if condition is None or not names:
            warnings.append(
                f"{where}#SBATCH --dependency={item} is not supported (use afterok, afternotok or afterany:NAME); ignored"
            )
            continue
        after.extend(f"{job}:{condition}" for job in names.split(":"))
    return after


# -- values ----------------------------------------------------------------------------------------

_SLURM_TIME = r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$"  # compiled on first use (re's cache)


def parse_signal(text: str) -> dict[str, Any]:
    """sbatch's ``--signal=[{R|B}:]SIG[@SECONDS]`` -> spec.checkpoint. ``B:`` signals the main
    process only (scope Main), without it every process of the job (scope All), as sbatch;
    ``R:`` is for reservations, which are not ours (taken as no prefix)."""
    where, _, rest = text.rpartition(":") if ":" in text else ("", "", text)
    sig, at, seconds = rest.partition("@")
    problems = []
    if where not in ("", "B", "R"):
        problems.append(f"{where!r} before ':' (only B: is meant, as in sbatch)")
    name = sig.upper().removeprefix("SIG")
    if name.isdigit():
        import signal as signal_mod  # lazy: its enum of signals costs every run's start-up ~0.5 ms

        try:
            name = signal_mod.Signals(int(name)).name.removeprefix("SIG")
        except ValueError:
            pass
    if name not in CHECKPOINT_SIGNALS:
        problems.append(f"{sig!r} is not a signal a job can trap (one of {', '.join(CHECKPOINT_SIGNALS)})")
    if at and not (seconds.isdigit() and 0 <= int(seconds) <= 65535):
        problems.append(f"{seconds!r} after '@' is not a number of seconds (0-65535)")
    if problems:
        raise SubmitError(f"--signal={text}: {'; '.join(problems)}; e.g. --signal=B:USR1@600")
    checkpoint: dict[str, Any] = {"signal": name, "before": f"{int(seconds) if at else 60}s"}
    if where != "B":
        checkpoint["scope"] = "All"  # sbatch without B: signals the job's processes, not only its shell
    return checkpoint


def parse_time(text: str) -> float:
    """Seconds from a Go-style duration (``4h30m``) or Slurm's formats: ``MM``, ``MM:SS``,
    ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``. A bare number is minutes, as in sbatch."""
    text = text.strip()
    match = re.match(_SLURM_TIME, text)
    if match:
        days, first, second, third = match.groups()
        numbers = [int(x) for x in (first, second, third) if x is not None]
        if days is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
            hours, minutes, seconds = (numbers + [0, 0])[:3]
            return int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
        if len(numbers) == 1:
            return numbers[0] * 60.0
        if len(numbers) == 2:
            return numbers[0] * 60.0 + numbers[1]
        return numbers[0] * 3600.0 + numbers[1] * 60 + numbers[2]
    try:
        return parse_duration(text)
    except ValueError:
        raise SubmitError(
            f"--time {text!r} does not parse; use e.g. 4h, 90m, 1h30m, or Slurm's 30, 1:30:00, 2-12"
        ) from None


_SLURM_MEM = r"(?i)^(\d+)([KMGT])?$"  # compiled on first use (re's cache)


def parse_memory(text: str) -> str:
    """``16Gi``, ``500M`` as in manifests; a bare number or Slurm's ``16G`` (powers of 1024, MiB by
    default) as sbatch means it."""
    match = re.match(_SLURM_MEM, text.strip())
    if match:
        return f"{match.group(1)}{(match.group(2) or 'M').upper()}i"
    try:
        parse_quantity(text)
    except ValueError as exc:
        raise SubmitError(f"--memory: {exc}") from None
    return text


def _integer(flag: str, text: Any, low: int = 0) -> int:
    try:
        number = int(str(text))
    except ValueError:
        raise SubmitError(f"{flag} {text!r} is not a whole number") from None
    if number < low:
        raise SubmitError(f"{flag} must be >= {low}")
    return number


def _pairs(flag: str, items: list[str], split_commas: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for pair in item.split(",") if split_commas else [item]:
            key, eq, value = pair.partition("=")
            if not eq or not key:
                raise SubmitError(f"{flag} {pair!r}: use KEY=VALUE")
            out[key] = value
    return out


_CONDITIONS = {"succeeded": "Succeeded", "failed": "Failed", "finished": "Finished"}


def parse_after(items: list[str], last_job: str | None) -> list[dict[str, str]]:
    """``--after JOB[:COND]`` -> dependsOn entries; ``@`` is the last job this user submitted."""
    out = []
    for item in items:
        job, _, condition = item.partition(":")
        if job == "@":
            if last_job is None:
                raise SubmitError("--after @: you have not submitted a job with gflowctl run on this home yet")
            job = last_job
        if not is_valid_name(job):
            raise SubmitError(f"--after {item!r}: {job!r} is not a job name")
        entry = {"job": job}
        if condition:
            if condition.lower() not in _CONDITIONS:
                raise SubmitError(f"--after {item!r}: the condition must be Succeeded, Failed or Finished")
            entry["condition"] = _CONDITIONS[condition.lower()]
        out.append(entry)
    return out


def parse_params(items: list[str]) -> dict[str, list[str]]:
    matrix: dict[str, list[str]] = {}
    for item in items:
        key, eq, values = item.partition("=")
        if not eq or not key:
            raise SubmitError(f"--param {item!r}: use KEY=V1,V2,...")
        parts = [v for v in values.split(",") if v != ""]
        if not parts:
            raise SubmitError(f"--param {key}: give at least one value, e.g. --param {key}=0.1,0.01")
        matrix[key] = parts
    return matrix


def parse_array(text: str) -> tuple[str, int | None]:
    """``0-9%2`` -> (``"0-9"``, 2)."""
    from controller.api.indices import parse_indices  # lazy: only --array needs it

    indices, percent, limit = text.partition("%")
    try:
        parse_indices(indices)
    except ValueError as exc:
        raise SubmitError(f"--array {text!r}: {exc}") from None
    return indices, (_integer("--array ...%N", limit, 1) if percent else None)


# -- names -----------------------------------------------------------------------------------------

_INTERPRETERS = {
    "python",
    "python3",
    "bash",
    "sh",
    "zsh",
    "torchrun",
    "accelerate",
    "deepspeed",
    "uv",
    "julia",
    "Rscript",
    "node",
    "perl",
}


def sanitize(text: str) -> str:
    """Any text -> the start of a valid job name (lowercase, digits, '-')."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return name[:50].strip("-") or "job"


def default_stem(command: list[str] | None, script_path: str | None) -> str:
    """``train`` for ``train.sh``, ``python3 train.py``, ``python -m pkg.train``; else the program's name."""
    if script_path is not None:
        return sanitize(os.path.splitext(os.path.basename(script_path))[0])
    assert command
    program = os.path.basename(command[0])
    if re.sub(r"[\d.]+$", "", program) in _INTERPRETERS:
        args = command[1:]
        for i, arg in enumerate(args):
            if arg == "-m" and i + 1 < len(args):
                return sanitize(args[i + 1].rsplit(".", 1)[-1])
            if arg == "-c" and i + 1 < len(args):  # sh -c 'python3 x.py ...': what the snippet runs
                words = args[i + 1].split()
                return (
                    default_stem(words, None)
                    if words and program.startswith(("sh", "bash", "zsh"))
                    else sanitize(program)
                )
            if arg in ("run", "launch") and program in ("uv", "accelerate"):
                continue
            if not arg.startswith("-"):
                return sanitize(os.path.splitext(os.path.basename(arg))[0])
    return sanitize(program)


# -- the manifest ----------------------------------------------------------------------------------


class Submission:
    __slots__ = ("environment", "exact_name", "kind", "manifest", "name", "warnings")

    def __init__(
        self,
        manifest: dict[str, Any],
        kind: str,  # job | sweep
        name: str,
        warnings: list[str],
        exact_name: bool,  # the user chose it (--name, # GFLOW --name): it must not exist yet
        environment: dict[str, str] | None = None,  # the submitter's, as --export says (api/export.py)
    ) -> None:
        self.manifest, self.kind, self.name, self.warnings = manifest, kind, name, warnings
        self.exact_name, self.environment = exact_name, environment


def build(
    options: dict[str, Any],
    *,
    command: list[str] | None = None,
    script_text: str | None = None,
    script_path: str | None = None,
    script_args: list[str] | None = None,
    cwd: str,
    suffix: str,
    last_job: str | None = None,
    name_from_sbatch: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Submission:
    """The manifest for one ``run``. Exactly one of ``command`` and ``script_text``. ``environ``:
    the submitter's environment, carried as ``--export`` says (none when not given)."""
    spec: dict[str, Any] = {}
    if script_text is not None:
        spec["script"] = ""  # pinned below, once its name is known (#SBATCH --output's %x %j)
    else:
        if not command:
            raise SubmitError("nothing to run: give a command after -- (gflowctl run -- python3 train.py) or a script")
        spec["command"] = list(command)
    workdir = options.get("workdir")
    spec["workingDir"] = cwd if workdir is None else _absolute(workdir, cwd)
    if "env" in options:
        spec["env"] = _pairs("--env", options["env"], split_commas=False)
    if "conda_env" in options:
        spec["condaEnv"] = options["conda_env"]
    resources: dict[str, Any] = {}
    if "gres" in options:
        options = {**parse_gres(options["gres"]), **options}  # --gpus/--gpu-type given as well win
    if "gpus" in options and not str(options["gpus"]).isdigit():  # --gpus 1g.10gb, --gpus 2:1g.10gb
        given = {"gpu_type": options["gpu_type"]} if "gpu_type" in options else {}  # --gpu-type wins
        options = {**options, **gpus_option(str(options["gpus"])), **given}
    if "gpus" in options:
        resources["gpus"] = _integer("--gpus", options["gpus"])
    if "gpu_type" in options:
        resources["gpuType"] = options["gpu_type"]
    if "cpus" in options:
        resources["cpus"] = _integer("--cpus", options["cpus"], low=1)
    if "gpu_memory" in options:
        resources["gpuMemory"] = parse_memory(options["gpu_memory"])
    if "memory" in options:
        resources["memory"] = parse_memory(options["memory"])
    if "cpus" in options:
        resources["cpus"] = _integer("--cpus-per-task", options["cpus"], 1)
    if resources:
        spec["resources"] = resources
    if options.get("shared"):
        if "gpu_memory" not in options:
            raise SubmitError("--shared needs --gpu-memory: the GPU memory the job may use per GPU, e.g. 20Gi")
        if not resources.get("gpus"):
            raise SubmitError("--shared needs --gpus 1 or more")
        spec["sharing"] = "Shared"
    if "priority" in options:
        spec["priority"] = _integer("--priority", options["priority"], low=-(2**31))
    if "time" in options:
        spec["timeLimit"] = format_duration(parse_time(options["time"]))
    if "signal" in options:
        spec["checkpoint"] = parse_signal(options["signal"])
    if "retries" in options:
        spec["backoffLimit"] = _integer("--retries", options["retries"])
    if "after" in options:
        spec["dependsOn"] = parse_after(options["after"], last_job)
    if "start_after" in options:
        spec["startAfter"] = options["start_after"]
    if options.get("interactive"):
        spec["tty"] = True

    exact = "name" in options and not name_from_sbatch
    if exact:
        name = options["name"]
        if not is_valid_name(name):
            raise SubmitError(
                f"--name {name!r} is not a valid name: at most 63 lowercase letters, digits and '-', "
                "starting and ending with a letter or digit"
            )
    else:
        stem = sanitize(options["name"]) if "name" in options else default_stem(command, script_path)
        name = f"{stem}-{suffix}"
    metadata: dict[str, Any] = {"name": name}
    if "label" in options:
        metadata["labels"] = _pairs("-l", options["label"], split_commas=True)
    environment = None
    if environ is not None:
        try:
            environment = exported_env(options.get("export"), environ)
        except ExportError as exc:
            raise SubmitError(str(exc)) from None
    if environment is not None:
        metadata["annotations"] = {ENV_ANNOTATION: ENV_FILE.format(name=name)}

    matrix = parse_params(options["param"]) if "param" in options else None
    array = parse_array(options["array"]) if "array" in options else None
    if matrix is not None and array is not None:
        raise SubmitError("use --param or --array, not both")
    if options.get("interactive") and (matrix is not None or array is not None):
        raise SubmitError("-it attaches to one job: drop --param/--array (or submit the sweep without -it)")
    if script_text is not None:
        slurm = (
            slurm_job(options, name, script_path or "script", cwd, array is not None)
            if options.get("sbatch_script")
            else None
        )
        if slurm is not None:
            spec["env"] = {**slurm.env, **spec.get("env", {})}  # the user's --env wins
        spec["script"] = pinned_script(
            script_text,
            script_path or "script",
            script_args or [],
            output=slurm.output if slurm else None,
            error=slurm.error if slurm else None,
        )
    if matrix is None and array is None:
        if "parallelism" in options:
            raise SubmitError("--max-concurrent is for sweeps: add --param or --array")
        manifest = {"apiVersion": API_VERSION, "kind": "Job", "metadata": metadata, "spec": spec}
        return Submission(manifest, "job", name, [], exact, environment)
    sweep: dict[str, Any] = {}
    parallelism = None
    if matrix is not None:
        sweep["matrix"] = matrix
    else:
        assert array is not None  # a job with neither returned above
        sweep["indices"], parallelism = array
        # scripts written for Slurm or gbatch read their index from these; {index} is each child's
        spec["env"] = {"SLURM_ARRAY_TASK_ID": "{index}", "GFLOW_ARRAY_TASK_ID": "{index}", **spec.get("env", {})}
    if "parallelism" in options:
        parallelism = _integer("--max-concurrent", options["parallelism"], 1)
    if parallelism is not None:
        sweep["parallelism"] = parallelism
    sweep["template"] = spec
    manifest = {"apiVersion": API_VERSION, "kind": "Sweep", "metadata": metadata, "spec": sweep}
    return Submission(manifest, "sweep", name, [], exact, environment)


def _absolute(path: str, cwd: str) -> str:
    if path.startswith("~") or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(cwd, path))


class SlurmJob:
    """What a script written for Slurm reads and names: its variables and its output paths."""

    __slots__ = ("env", "error", "output")

    def __init__(self, env: dict[str, str], output: str | None, error: str | None) -> None:
        self.env, self.output, self.error = env, output, error


def slurm_job(options: dict[str, Any], name: str, script_path: str, cwd: str, array: bool) -> SlurmJob:
    """``SLURM_*`` variables and ``--output``/``--error`` paths with ``%x %j %A %a %%`` filled in. The
    job's id (``SLURM_JOB_ID``, ``%j``) is its gflow name: unique on the machine and what every
    gflowctl verb takes. An array's tasks are a Sweep's children: ``{sweep}``/``{index}`` are
    filled in per child (``api/sweep_children.py``)."""
    job_name = options.get("name") or os.path.basename(script_path)  # sbatch's: -J, else the script's name
    job_id = "{sweep}-{index}" if array else name
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOB_NAME": job_name, "SLURM_SUBMIT_DIR": cwd}
    if array:
        env["SLURM_ARRAY_JOB_ID"] = "{sweep}"
    if "cpus" in options:
        env["SLURM_CPUS_PER_TASK"] = str(options["cpus"])
    fields = {
        "x": job_name,
        "j": job_id,
        "A": "{sweep}" if array else job_id,
        "a": "{index}" if array else "0",
        "%": "%",
    }

    def fill(pattern: str | None) -> str | None:
        if pattern is None:
            return None
        return re.sub(r"%(\d*)([xjAa%])", lambda m: fields[m.group(2)].zfill(int(m.group(1) or 0)), pattern)

    output, error = fill(options.get("slurm_output")), fill(options.get("slurm_error"))
    return SlurmJob(env, output, None if error == output else error)


_DELIMITER = "GFLOW_PINNED_SCRIPT"


def pinned_script(text: str, path: str, args: list[str], output: str | None = None, error: str | None = None) -> str:
    """A bash script that writes ``text`` (the user's script as it was at submission) to a private
    temporary file and runs it with ``args``, by its own ``#!`` line (bash without one), with
    sbatch's semantics: no ``-e`` unless the script sets it. ``output``/``error`` (``#SBATCH
    --output/--error``): its stdout (and stderr, without ``error``) also go to these files, made by
    the job's user in its working directory as sbatch makes them; the job's log keeps everything."""
    delimiter = _DELIMITER
    lines = text.splitlines()
    while delimiter in lines:
        delimiter += "_"
    body = text if text.endswith("\n") else text + "\n"
    runner = '"$pinned"' if text.startswith("#!") else 'bash "$pinned"'
    import shlex  # lazy: only a script (or its directives) needs it, not run -- CMD

    quoted = "".join(" " + shlex.quote(a) for a in args)
    streams, waits = "", ""
    folders = sorted({os.path.dirname(p) for p in (output, error) if p is not None and os.path.dirname(p)})
    if folders:  # sbatch needs them to exist; making them (as the job's user) spares a lost job
        streams += "mkdir -p --" + "".join(" " + shlex.quote(f) for f in folders) + "\n"
    if output is not None:  # tee: into the file and the job's log; waited for, so the file is whole at the end
        streams += f"exec > >(tee -- {shlex.quote(output)}){'' if error is not None else ' 2>&1'}; out_pid=$!\n"
        waits += " $out_pid"
    if error is not None:
        streams += f"exec 2> >(tee -- {shlex.quote(error)} >&2); err_pid=$!\n"
        waits += " $err_pid"
    run = f"{runner}{quoted}\n"
    if waits:
        run = f"{runner}{quoted}\ncode=$?\nexec >&- 2>&-\nwait{waits}\nexit $code\n"
    return (
        f"# {path} as it was when submitted (gflowctl run pins it: editing the file changes no queued job)\n"
        "set +e\n"
        'pinned=$(mktemp "${TMPDIR:-/tmp}/gflow-script.XXXXXX") || exit 1\n'
        "trap 'rm -f \"$pinned\"' EXIT\n"
        f"cat > \"$pinned\" <<'{delimiter}'\n"
        f"{body}"
        f"{delimiter}\n"
        'chmod +x "$pinned"\n'
        f"{streams}{run}"
    )


_PLACEHOLDER = "gflow-script-placeholder-3f9c1d"


def render(manifest: dict[str, Any]) -> str:
    """The manifest as YAML, a script as a literal block (readable, and what an editor shows)."""
    spec = manifest["spec"].get("template", manifest["spec"])
    script = spec.get("script")
    if script is None or (not script.isprintable() and not all(c.isprintable() or c in "\n\t" for c in script)):
        return dump(manifest)
    spec["script"] = _PLACEHOLDER
    try:
        text = dump(manifest)
    finally:
        spec["script"] = script
    out = []
    for line in text.splitlines(keepends=True):
        key, _, value = line.partition(": ")
        if value.strip() != _PLACEHOLDER:
            out.append(line)
            continue
        indent = " " * (len(key) - len(key.lstrip()) + 2)
        chomp = "-" if not script.endswith("\n") else "+" if script.endswith("\n\n") else ""
        indicator = "2" if script[:1] in (" ", "\n") else ""  # a leading space or blank line needs it
        out.append(f"{key}: |{indicator}{chomp}\n")
        body = script[:-1] if script.endswith("\n") else script
        out.extend(f"{indent}{s}\n" if s else "\n" for s in body.split("\n"))
    return "".join(out)
