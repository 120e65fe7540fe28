"""``gflowctl completion bash|zsh|fish``: shell completion scripts generated from the parsers.

Verbs, their options and the choices of their arguments come from ``controller.cli.main``'s
argparse parser, and ``run``'s flags from its own table (``controller.api.submit.FLAGS``), so a new
verb or flag completes without touching this file (tests/test_completion.py checks it). What an
argument names is read from its ``dest`` and ``metavar``: ``name``/``names`` are jobs (``sweep`` or
``reservation`` names after ``delete sweep`` and ``describe reservation``; a ``TYPE/`` typed first
completes ``TYPE/NAME``), ``kind`` gets the resource types of that verb (their aliases, such as
``node`` for ``gpus``, once a prefix is typed: an empty word lists only the types), ``target`` is
``job/NAME``, files and folders where a path goes (``-f``, ``--workdir``, a script), a command after
``run --``. Names come from ``gflowctl __complete jobs`` (``run/jobs.table``, else
``run/index.json``: one file read, no gflowd), honouring ``--home`` and ``--spec-dir`` on the
command line being completed. zsh reuses the bash function through ``bashcompinit``; fish gets its
own ``complete`` lines.
"""

from __future__ import annotations

import sys

from controller.cli.common import CliError, resolve_home
from controller.client.read.state import read_index, read_table

TYPE_CHECKING = False  # not typing's: `__complete` runs at every TAB, and imports what it needs only
if TYPE_CHECKING:
    import argparse

KINDS = {
    "get": ["jobs", "sweeps", "reservations", "gpus", "events"],
    "describe": ["job", "sweep", "reservation"],
    "delete": ["job", "sweep", "reservation"],
    "patch": ["job"],
}
# the other spellings each verb accepts (README: `get node`); one- and two-letter shorthands
# (`get j`, `get ev`) are for typing, not for a completion menu
ALIASES = {
    "get": ["job", "sweep", "reservation", "gpu", "node", "nodes", "event"],
    "describe": ["jobs", "sweeps", "reservations"],
    "delete": ["jobs", "sweeps", "reservations"],
    "patch": ["jobs"],
}
SHELLS = ("bash", "zsh", "fish")
PHASES = ["Pending", "Running", "Succeeded", "Failed", "Cancelled", "Rejected"]
# what an option's value is, by its dest, where argparse's choices do not say it
FILE_DESTS = {"filename", "trace", "config", "reservations"}
DIR_DESTS = {"home", "spec_dir", "plot", "workdir"}
JOB_DESTS = {"after"}  # run --after JOB
RUN_OUTPUTS = ["yaml", "name"]  # run -o (controller/cli/run.py accepts these two)


def kinds_with_aliases(verb: str) -> list[str]:
    return KINDS.get(verb, ["job"]) + ALIASES.get(verb, [])


def _subparsers_action(parser: argparse.ArgumentParser):
    import argparse  # lazy: only the scripts are built from the parser, never a TAB's names

    for action in parser._actions:  # argparse has no public accessor for its sub-commands
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = _subparsers_action(parser)
    return dict(action.choices) if action else {}


def _verb_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    action = _subparsers_action(parser)
    return {a.dest: a.help or "" for a in action._choices_actions} if action else {}


def _value_kind(dest: str, metavar, choices) -> str:
    """What an option's value completes to: ``words:A B``, ``target`` (job/NAME), ``jobs``, ``file``,
    ``dir`` or ``none``."""
    if choices:
        return "words:" + " ".join(str(c) for c in choices)
    if dest == "phase":
        return "words:" + " ".join(PHASES)
    if metavar == "job/NAME":
        return "target"
    if dest in JOB_DESTS:
        return "jobs"
    if dest in FILE_DESTS or metavar == "FILE":
        return "file"
    if dest in DIR_DESTS or metavar == "DIR":
        return "dir"
    return "none"


def _positional_kind(action: argparse.Action) -> str:
    import argparse  # lazy: as above

    if action.choices:  # before the dest: export's `target` is slurm|k8s, not job/NAME
        return "choices:" + " ".join(str(c) for c in action.choices)
    if action.nargs == argparse.REMAINDER:
        return "program"  # exec NAME -- CMD
    if action.dest == "kind":
        return "kind"
    if action.dest in ("name", "names"):
        return "names"
    if action.dest == "target":
        return "target"
    return "none"


def _run_spec() -> dict:
    """``run``'s flags: its own table (directives parse with it), not argparse."""
    from controller.api.submit import FLAGS  # lazy: only the scripts need run's flags

    options = [name for flag in FLAGS for name in flag.names]
    takes_value = [name for flag in FLAGS if flag.takes_value for name in flag.names]
    values = {}
    for flag in FLAGS:
        if flag.takes_value:
            kind = "words:" + " ".join(RUN_OUTPUTS) if flag.dest == "output" else _value_kind(flag.dest, None, None)
            values.update(dict.fromkeys(flag.names, kind))
    return {"options": options, "takes_value": takes_value, "values": values, "positionals": ["program"]}


def _spec(parser: argparse.ArgumentParser) -> dict:
    """verb -> {options, takes_value, values: option -> what its value is, positionals: [kind]}"""
    import argparse  # lazy: as above

    verbs = {}
    for verb, sub in _subparsers(parser).items():
        if verb == "run":
            verbs[verb] = _run_spec()
            continue
        options: list[str] = []
        takes_value: list[str] = []
        values: dict[str, str] = {}
        positionals: list[str] = []
        for action in sub._actions:
            if action.option_strings:
                options.extend(action.option_strings)
                if action.nargs != 0:
                    takes_value.extend(action.option_strings)
                    kind = _value_kind(action.dest, action.metavar, action.choices)
                    values.update(dict.fromkeys(action.option_strings, kind))
                continue
            repeat = action.nargs in ("*", "+", argparse.REMAINDER)
            positionals.append(_positional_kind(action) + ("*" if repeat else ""))
        verbs[verb] = {"options": options, "takes_value": takes_value, "values": values, "positionals": positionals}
    return verbs


def _global_options(parser: argparse.ArgumentParser) -> list[str]:
    return [s for a in parser._actions if a.option_strings for s in a.option_strings]


# which names a `get|describe|delete KIND NAME` completes: the kind typed before them
NAMES_OF_KIND = '$(case "$kind" in sweep*) echo sweeps;; res*) echo reservations;; *) echo jobs;; esac)'
NAMES = '_gflowctl_names {what} "${{instance[@]}}"'
TARGET = 'COMPREPLY=($(compgen -W "$(_gflowctl_names jobs "${instance[@]}" | sed "s|^|job/|")" -- "$cur"))'
# a word with a slash is TYPE/NAME (what `get -o name` prints): the names of that type, prefixed
TYPED = (
    'if [[ "$cur" == */* ]]; then COMPREPLY=($(compgen -W "$(_gflowctl_names "${cur%%/*}" "${instance[@]}"'
    ' | sed "s|^|${cur%%/*}/|")" -- "$cur")); return; fi'
)
FILES = 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur"))'
DIRS = 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$cur"))'


def _value_action(kind: str) -> str:
    if kind.startswith("words:"):
        return f'COMPREPLY=($(compgen -W "{kind[6:]}" -- "$cur"))'
    return {
        "target": TARGET,
        "jobs": 'COMPREPLY=($(compgen -W "$(_gflowctl_names jobs "${instance[@]}")" -- "$cur"))',
        "file": FILES,
        "dir": DIRS,
    }.get(kind, ":")


def bash_script(parser: argparse.ArgumentParser) -> str:
    import shlex  # lazy: only the scripts quote

    verbs = _spec(parser)
    lines = [
        "# gflowctl completion for bash (and zsh via bashcompinit). Generated by `gflowctl completion bash`.",
        "#   bash: source <(gflowctl completion bash)     or save it to /etc/bash_completion.d/gflowctl",
        "_gflowctl_names() {",
        '    command gflowctl __complete "$@" 2>/dev/null',
        "}",
        "_gflowctl() {",
        '    [[ -n "${ZSH_VERSION-}" ]] && setopt localoptions ksharrays  # bashcompinit: arrays from 0',
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        # bash splits `--phase=Ru` at the `=` (COMP_WORDBREAKS): the option is the word before it
        '    [[ "$prev" == "=" && $COMP_CWORD -ge 2 ]] && prev="${COMP_WORDS[COMP_CWORD-2]}"',
        # pos: positional words seen; dd: pos when `--` came (-1: none); a word after it is never a flag
        '    local verb="" i w pos=0 dd=-1 kind="" instance=()',
        "    COMPREPLY=()",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        w="${COMP_WORDS[i]}"',
        '        if [[ -n "$verb" && $dd -lt 0 && "$w" == "--" ]]; then dd=$pos; continue; fi',
        "        if [[ $dd -lt 0 ]]; then",
        '            case "$w" in',
        "                --home|--spec-dir)",
        '                    if [[ "${COMP_WORDS[i+1]}" == "=" ]]; then instance+=("$w=${COMP_WORDS[i+2]}"); ((i += 2))',
        '                    else instance+=("$w" "${COMP_WORDS[i+1]}"); ((i++)); fi',
        "                    continue ;;",
        '                --home=*|--spec-dir=*) instance+=("$w"); continue ;;',
        "            esac",
        "        fi",
        '        if [[ -z "$verb" ]]; then',
        '            [[ "$w" == -* ]] && continue',
        '            verb="$w"; continue',
        "        fi",
        '        if [[ $dd -lt 0 && ! ( "$verb" == run && $pos -gt 0 ) ]]; then',
        '            case "$verb $w" in',
    ]
    for verb, spec in sorted(verbs.items()):
        values = [o for o in spec["takes_value"] if o not in ("--home", "--spec-dir")]
        if values:  # an option's value is not a positional argument
            patterns = "|".join(f'"{verb} {v}"' for v in values)
            skip = '((i++)); [[ "${COMP_WORDS[i]}" == "=" ]] && ((i++)); continue'  # --opt VALUE, --opt=VALUE
            lines.append(f"                {patterns}) {skip} ;;")
    lines += [
        "            esac",
        '            [[ "$w" == -* ]] && continue',
        "        fi",
        '        [[ $pos -eq 0 ]] && kind="$w"',
        "        ((pos++))",
        "    done",
        '    if [[ -z "$verb" ]]; then',
        '        case "$prev" in --home|--spec-dir) ' + DIRS + "; return ;; esac",
        f'        COMPREPLY=($(compgen -W "{" ".join(sorted(verbs))} {" ".join(_global_options(parser))}" -- "$cur"))',
        "        return",
        "    fi",
        # run: after its script or `--`, every word is the job's own (a command, then files)
        "    if [[ $dd -ge 0 ]]; then",
        '        if [[ $pos -eq $dd && ( "$verb" == run || "$verb" == exec ) ]]; then',
        '            COMPREPLY=($(compgen -c -- "$cur")); return',
        "        fi",
        "        " + FILES + "; return",
        "    fi",
        '    if [[ "$verb" == run && $pos -gt 0 ]]; then ' + FILES + "; return; fi",
        '    case "$verb $prev" in',
    ]
    for verb, spec in sorted(verbs.items()):
        for option in spec["takes_value"]:
            lines.append(f'        "{verb} {option}") {_value_action(spec["values"].get(option, "none"))}; return ;;')
    lines += [
        "    esac",
        '    case "$verb" in',
    ]
    for verb, spec in sorted(verbs.items()):
        lines.append(
            f'        {shlex.quote(verb)}) if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "{" ".join(spec["options"])}" -- "$cur")); return; fi'
        )
        for index, positional in enumerate(spec["positionals"]):
            repeat = positional.endswith("*")
            positional = positional.rstrip("*")
            test = f"$pos -ge {index}" if repeat else f"$pos -eq {index}"
            if positional == "kind":  # ${cur:+...}: the aliases only once something is typed
                kinds, aliases = " ".join(KINDS.get(verb, ["job"])), " ".join(ALIASES.get(verb, []))
                action = f'{TYPED}; COMPREPLY=($(compgen -W "{kinds}${{cur:+ {aliases}}}" -- "$cur"))'
            elif positional == "names":
                what = NAMES_OF_KIND if verb in ("delete", "describe", "get") else "jobs"
                action = f'{TYPED}; COMPREPLY=($(compgen -W "$({NAMES.format(what=what)})" -- "$cur"))'
                if verb == "get":  # names only of the kinds that have them (not gpus, events)
                    action = f'[[ "$kind" == job* || "$kind" == sweep* || "$kind" == res* ]] && {{ {action}; }}'
            elif positional == "target":
                action = f"{TYPED}; {TARGET}"
            elif positional.startswith("choices:"):
                action = f'COMPREPLY=($(compgen -W "{positional[8:]}" -- "$cur"))'
            elif positional == "program":
                action = FILES
            else:
                continue
            lines.append(f"            if [[ {test} ]]; then {action}; return; fi")
            if repeat:
                break
        lines.append("            ;;")
    lines += [
        "    esac",
        "}",
        "complete -F _gflowctl gflowctl",
        "",
    ]
    return "\n".join(lines)


def zsh_script(parser: argparse.ArgumentParser) -> str:
    return (
        "# gflowctl completion for zsh. Generated by `gflowctl completion zsh`.\n"
        "#   source <(gflowctl completion zsh)     (in ~/.zshrc; it runs compinit -i if the rc did not)\n"
        "(( $+functions[compdef] )) || { autoload -U +X compinit && compinit -i; }\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser).split("\n", 2)[2]
    )


def fish_script(parser: argparse.ArgumentParser) -> str:
    import shlex  # lazy: only the scripts quote

    verbs = _spec(parser)
    out = [
        "# gflowctl completion for fish. Generated by `gflowctl completion fish`.",
        "#   gflowctl completion fish > ~/.config/fish/completions/gflowctl.fish",
        "complete -c gflowctl -f",
        # names of the jobs (or of TYPE/ once typed: TYPE/NAME), of the instance on the line
        "function __gflowctl_names",
        "    set -l words (commandline -opc)",
        "    set -l args",
        "    for i in (seq (count $words))",
        "        if contains -- $words[$i] --home --spec-dir; and test $i -lt (count $words)",
        "            set args $args $words[$i] $words[(math $i + 1)]",
        "        else if string match -qr -- '^--(home|spec-dir)=' $words[$i]",
        "            set args $args $words[$i]",
        "        end",
        "    end",
        "    set -l token (commandline -ct)",
        "    if string match -q -- '*/*' $token",
        "        set -l type (string split -m1 / -- $token)[1]",
        "        gflowctl __complete $type $args 2>/dev/null | string replace -r '^' $type/",
        "    else",
        "        gflowctl __complete $argv[1] $args 2>/dev/null",
        "    end",
        "end",
        # the word right after `run --` / `exec NAME --` is a command
        "function __gflowctl_command_after_dashes",
        "    set -l words (commandline -opc)",
        "    set -l at (contains -i -- -- $words); and test $at -eq (count $words)",
        "end",
    ]
    for verb, text in _verb_help(parser).items():
        out.append(f"complete -c gflowctl -n __fish_use_subcommand -a {shlex.quote(verb)} -d {shlex.quote(text)}")
    for verb, spec in sorted(verbs.items()):
        cond = f"__fish_seen_subcommand_from {verb}"
        for option in spec["options"]:
            if option.startswith("--"):
                flag = f"-l {option[2:]}"
            elif len(option) == 2:
                flag = f"-s {option[1]}"
            else:
                flag = f"-o {option[1:]}"  # run -it
            value = spec["values"].get(option)
            extra = ""
            if value is None:
                pass
            elif value == "target":
                extra = " -x -a '(__gflowctl_names jobs | string replace -r \"^(?!job/)\" job/)'"
            elif value == "jobs":
                extra = " -x -a '(__gflowctl_names jobs)'"
            elif value.startswith("words:"):
                extra = f" -x -a {shlex.quote(value[6:])}"
            elif value in ("file", "dir"):
                extra = " -r -F"
            else:
                extra = " -x"
            out.append(f"complete -c gflowctl -n {shlex.quote(cond)} {flag}{extra}")
        kinds = [p.rstrip("*") for p in spec["positionals"]]
        if "kind" in kinds:
            out.append(
                f"complete -c gflowctl -n {shlex.quote(cond)} -a {shlex.quote(' '.join(KINDS.get(verb, ['job'])))}"
            )
            if ALIASES.get(verb):
                out.append(
                    f"complete -c gflowctl -n {shlex.quote(cond)} -a {shlex.quote(' '.join(ALIASES[verb]))} -d alias"
                )
        if "names" in kinds:
            out.append(f"complete -c gflowctl -n {shlex.quote(cond)} -a '(__gflowctl_names jobs)'")
        if "target" in kinds:
            out.append(
                f"complete -c gflowctl -n {shlex.quote(cond)} -a '(__gflowctl_names jobs | string replace -r \"^(?!job/)\" job/)'"
            )
        if "program" in kinds:
            out.append(f"complete -c gflowctl -n {shlex.quote(cond)} -F")
            after = f"{cond}; and __gflowctl_command_after_dashes"
            out.append(f"complete -c gflowctl -n {shlex.quote(after)} -a '(__fish_complete_command)'")
        for kind in kinds:
            if kind.startswith("choices:"):
                out.append(f"complete -c gflowctl -n {shlex.quote(cond)} -a {shlex.quote(kind[8:])}")
    return "\n".join(out) + "\n"


def completion(parser: argparse.ArgumentParser, shell: str) -> int:
    scripts = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}
    if shell not in scripts:
        raise CliError(f"unknown shell {shell!r}; use bash, zsh or fish")
    sys.stdout.write(scripts[shell](parser))
    return 0


def complete_names(argv: list[str]) -> int:
    """``gflowctl __complete jobs|sweeps|reservations [--home H] [--spec-dir D]``: names, one a
    line, from the jobs table (one marshal read) or the index; never an error (a completion must
    not print one)."""
    # read by hand, as main.py reads run's instance options: a TAB pays for no argparse
    given: dict[str, str | None] = {"what": "jobs", "--home": None, "--spec-dir": None}
    words = iter(argv)
    for word in words:
        flag, eq, value = word.partition("=")
        if flag in ("--home", "--spec-dir"):
            given[flag] = value if eq else next(words, None)
        elif not word.startswith("-"):
            given["what"] = word
    what = str(given["what"])
    what = "sweeps" if what.startswith("sweep") else "reservations" if what.startswith("res") else "jobs"
    try:
        home = resolve_home(given["--home"], given["--spec-dir"])
        table = read_table(home) if what == "jobs" else None
        names = table.rows if table is not None else (read_index(home) or {}).get(what) or {}
    except Exception:
        return 0
    if names:
        sys.stdout.write("\n".join(sorted(names)) + "\n")
    return 0
