"""Shell completion: the bash script is valid and, sourced in a real bash, completes verbs, kinds,
option values and job names from run/index.json (of the --home on the line being completed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controller.model.records import JobState
from controller.paths import Home
from controller.record.recorder import Recorder

BIN = str(Path(sys.executable).parent)


def script(shell: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "completion", shell], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "gflowctl.bash"
    path.write_text(script("bash"))
    return path


@pytest.fixture
def homes(tmp_path, monkeypatch):
    """Two instances: GFLOW_HOME has train, trial, other; a second home has only zeta."""
    made = []
    for root, names in ((tmp_path / "main", ["train", "trial", "other"]), (tmp_path / "second", ["zeta"])):
        home = Home.resolve(root)
        home.ensure()
        recorder = Recorder(home)
        recorder.write_states({n: JobState(name=n) for n in names}, [])
        recorder.write_index({})
        made.append(home)
    monkeypatch.setenv("GFLOW_HOME", str(made[0].root))
    return made


def complete(bash_script: Path, line: str) -> list[str]:
    """What bash offers for ``line`` (the cursor at its end), via the generated function."""
    words = line.split(" ")
    program = f"""
source {bash_script}
COMP_WORDS=({" ".join(repr(w) if w else '""' for w in words)})
COMP_CWORD={len(words) - 1}
COMP_LINE={line!r}
COMP_POINT={len(line)}
_gflowctl
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", "--norc", "-c", program], capture_output=True, text=True, env=env, timeout=30)
    assert result.returncode == 0, result.stderr
    return [w for w in result.stdout.splitlines() if w]


def test_the_bash_script_is_valid(bash_script):
    result = subprocess.run(["bash", "-n", str(bash_script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_verbs_kinds_and_option_values(bash_script, homes):
    assert complete(bash_script, "gflowctl de") == ["delete", "describe"]
    assert complete(bash_script, "gflowctl get ") == ["jobs", "sweeps", "reservations", "gpus", "events"]
    assert complete(bash_script, "gflowctl get jobs -o ") == ["wide", "yaml", "json", "name"]
    assert complete(bash_script, "gflowctl get jobs --phase Ru") == ["Running"]
    assert complete(bash_script, "gflowctl completion ") == ["bash", "zsh", "fish"]
    assert "--dry-run" in complete(bash_script, "gflowctl apply --")


def test_every_verb_and_every_flag_of_the_parsers_completes(bash_script, homes):
    """The word lists are the parsers' own: argparse's for every verb, run's flag table for run. A
    flag added to either completes without touching completion.py; a hand-kept list would drift."""
    from controller.api.submit import FLAGS
    from controller.cli.completion import _subparsers
    from controller.cli.main import build_parser

    verbs = _subparsers(build_parser())
    assert set(complete(bash_script, "gflowctl ")) >= set(verbs)
    for verb, parser in verbs.items():
        flags = {s for a in parser._actions for s in a.option_strings}
        if verb == "run":  # its own parser (directives use it): argparse knows only -h
            flags = {name for flag in FLAGS for name in flag.names}
        assert flags <= set(complete(bash_script, f"gflowctl {verb} -")), verb


def test_positionals_after_flags_complete_what_they_name(bash_script, homes, tmp_path, monkeypatch):
    (tmp_path / "train.sh").write_text("true\n")
    monkeypatch.chdir(tmp_path)
    assert complete(bash_script, "gflowctl export ") == ["slurm", "k8s"]
    assert complete(bash_script, "gflowctl export k8s tr") == ["train", "trial"]
    assert complete(bash_script, "gflowctl export k8s -f tra") == ["train.sh"]
    assert complete(bash_script, "gflowctl run -o ") == ["yaml", "name"]
    assert complete(bash_script, "gflowctl run --after o") == ["other"]
    assert complete(bash_script, "gflowctl run --gpus 1 tra") == ["train.sh"]
    assert complete(bash_script, "gflowctl run --gpus 1 train.sh --") == []  # the script's own arguments
    assert complete(bash_script, "gflowctl cancel job/tr") == ["job/train", "job/trial"]
    assert complete(bash_script, "gflowctl describe job/o") == ["job/other"]
    assert complete(bash_script, "gflowctl set ") == ["priority"]
    assert complete(bash_script, "gflowctl set priority o") == ["other"]
    # --opt=VALUE: bash's words are `--opt`, `=`, VALUE
    assert complete(bash_script, "gflowctl get jobs --phase = Ru") == ["Running"]
    assert complete(bash_script, "gflowctl export --partition = gpu sl") == ["slurm"]
    assert complete(bash_script, f"gflowctl describe job --home = {homes[1].root} ") == ["zeta"]


def test_aliases_of_the_kinds_complete_once_typed(bash_script, homes):
    # an empty word shows the kinds themselves; a typed prefix reaches their aliases too
    assert complete(bash_script, "gflowctl get n") == ["node", "nodes"]
    assert complete(bash_script, "gflowctl get g") == ["gpus", "gpu"]
    assert complete(bash_script, "gflowctl get ev") == ["events", "event"]
    assert complete(bash_script, "gflowctl describe j") == ["job", "jobs"]
    assert complete(bash_script, "gflowctl delete s") == ["sweep", "sweeps"]


def test_every_alias_a_verb_accepts_is_offered_and_every_offered_kind_is_accepted(homes):
    from controller.cli import get
    from controller.cli.completion import KINDS, kinds_with_aliases

    accepted = {
        k
        for k in get.JOB_KINDS + get.GPU_KINDS + get.SWEEP_KINDS + get.RESERVATION_KINDS + get.EVENT_KINDS
        if len(k) > 2
    }
    assert set(kinds_with_aliases("get")) == accepted  # one- and two-letter shorthands are for typing
    for verb in KINDS:
        for kind in kinds_with_aliases(verb):
            argv = {
                "get": ["get", kind],
                "describe": ["describe", kind, "x"],
                "delete": ["delete", kind, "x"],
                "patch": ["patch", kind, "x", "-p", "{}"],
            }[verb]
            result = subprocess.run(
                [sys.executable, "-m", "controller.cli.main", *argv], capture_output=True, text=True, timeout=30
            )
            assert "unknown resource type" not in result.stderr, (argv, result.stderr)


def test_job_names_from_the_index(bash_script, homes):
    assert complete(bash_script, "gflowctl describe job tr") == ["train", "trial"]
    assert complete(bash_script, "gflowctl logs ") == ["other", "train", "trial"]
    assert complete(bash_script, "gflowctl cancel train t") == ["train", "trial"]
    assert complete(bash_script, "gflowctl get jobs -o wide o") == ["other"]  # -o's value is not a name
    assert complete(bash_script, "gflowctl wait job/tra") == ["job/train"]
    assert complete(bash_script, "gflowctl get events --for job/o") == ["job/other"]
    # the instance named on the line wins over GFLOW_HOME
    assert complete(bash_script, f"gflowctl --home {homes[1].root} describe job ") == ["zeta"]
    assert complete(bash_script, f"gflowctl logs --home {homes[1].root} ") == ["zeta"]


def test_describe_completes_sweep_names_after_the_sweep_type(bash_script, homes):
    from controller.model.records import SweepState

    recorder = Recorder(homes[0])
    recorder.write_states({n: JobState(name=n) for n in ("train", "trial", "other")}, [])
    recorder.write_sweeps({"grid": SweepState(name="grid"), "gamma": SweepState(name="gamma")}, [])
    recorder.write_index({})
    assert complete(bash_script, "gflowctl describe s") == ["sweep", "sweeps"]
    assert complete(bash_script, "gflowctl describe sweep g") == ["gamma", "grid"]
    assert complete(bash_script, "gflowctl describe job t") == ["train", "trial"]


def test_reservation_names_complete_after_the_reservation_type(bash_script, homes):
    from controller.model.records import ReservationState

    recorder = Recorder(homes[0])
    recorder.write_states({n: JobState(name=n) for n in ("train", "rerun")}, [])
    recorder.write_reservations({"rack": ReservationState(name="rack"), "night": ReservationState(name="night")}, [])
    recorder.write_index({})
    assert complete(bash_script, "gflowctl delete reservation ") == ["night", "rack"]
    assert complete(bash_script, "gflowctl get reservations r") == ["rack"]
    assert complete(bash_script, "gflowctl describe job r") == ["rerun"]


def test_names_of_a_home_without_an_index_complete_to_nothing(bash_script, tmp_path, monkeypatch):
    monkeypatch.setenv("GFLOW_HOME", str(tmp_path / "nowhere"))
    assert complete(bash_script, "gflowctl logs ") == []


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts(shell, tmp_path, homes):
    text = script(shell)
    for verb in ("apply", "get", "describe", "logs", "stats", "completion"):
        assert verb in text
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed: only the text was checked")
    path = tmp_path / f"gflowctl.{shell}"
    path.write_text(text)
    check = ["zsh", "-n", str(path)] if shell == "zsh" else ["fish", "--no-execute", str(path)]
    result = subprocess.run(check, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    # zsh filters the candidates by the typed prefix itself (bashcompinit's compgen offers all):
    # ask for every job there; fish filters in `complete -C`
    if shell == "zsh":  # call the function the way bashcompinit's wrapper does (zsh's arrays, from 1)
        program = f"source {path}\nCOMP_WORDS=(gflowctl describe job '')\nCOMP_CWORD=3\n_gflowctl\nprint -l -- \"${{COMPREPLY[@]}}\"\n"
        argv = ["zsh", "-f", "-c", program]
    else:
        argv = ["fish", "--no-config", "-c", f"source {path}; complete -C 'gflowctl describe job tr'"]
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode == 0, result.stderr
    expected = ["other", "train", "trial"] if shell == "zsh" else ["train", "trial"]
    assert [line.split("\t")[0] for line in result.stdout.splitlines()] == expected, result.stdout


def test_unknown_shell_is_a_one_line_error():
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "completion", "tcsh"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 1 and result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1
