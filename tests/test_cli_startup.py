"""gflowctl's start-up: each verb imports only what it needs (measured in a fresh interpreter, as
users run it), and the static ``--help`` lists every verb the parser accepts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import gflowctl_imports

from controller.cli.main import VERBS, build_parser, help_text

HEAVY = ("argparse", "pathlib", "dataclasses", "typing", "pydantic", "ruamel.yaml", "tempfile", "controller.cli.common")


def _loaded(tmp_path, *argv: str) -> list[str]:
    """Exit code, then which of the heavy modules the verb imported."""
    loaded, probe = gflowctl_imports(list(argv), HEAVY, {**os.environ, "GFLOW_HOME": str(tmp_path / "home")})
    assert probe.returncode == 0, probe.stderr
    return loaded


@pytest.mark.e2e
@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"], ["version"], ["--version"]])
def test_version_and_help_import_nothing_heavy(tmp_path, argv):
    assert _loaded(tmp_path, *argv) == ["0"]


@pytest.mark.e2e
def test_installed_script_starts_without_re(tmp_path):
    """The gflowctl a venv runs is the plain script of ``scripts/``: the console-script shim pip
    generates imports ``re`` first (~5 ms of a ~20 ms start) only to strip a Windows suffix."""
    script = Path(sys.executable).with_name("gflowctl")
    env = {**os.environ, "GFLOW_HOME": str(tmp_path / "home"), "PYTHONPROFILEIMPORTTIME": "1"}
    out = subprocess.run([str(script), "version"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("gflowctl "), out
    # the script's own imports are the unindented names (site's, an editable install's finder among
    # them, are nested under site)
    top = [line.rsplit("| ", 1)[1] for line in out.stderr.splitlines() if line.startswith("import time:")]
    top = [name for name in top if not name.startswith(" ")]
    assert "controller.cli.main" in top
    assert "re" not in top, top


@pytest.mark.e2e
def test_get_jobs_imports_no_parser_of_yaml_or_models(tmp_path):
    loaded = _loaded(tmp_path, "get", "jobs")
    assert loaded[0] == "0"
    assert not {"pydantic", "ruamel.yaml", "dataclasses", "tempfile", "typing"} & set(loaded[1:]), loaded


def test_static_help_lists_every_verb_the_parser_accepts():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "verb")  # argparse has no public accessor
    assert list(sub.choices) == list(VERBS)
    listed = [
        line.split()[0]
        for line in help_text().split("positional arguments:")[1].split("options:")[0].splitlines()[2:]
        if line.strip()
    ]
    assert listed == list(VERBS)
    for verb, (what, _, _) in VERBS.items():
        assert f"{verb}" in help_text() and what in help_text()


def test_one_verb_builds_only_its_own_parser():
    sub = next(a for a in build_parser("get")._actions if a.dest == "verb")
    assert list(sub.choices) == ["get"]


@pytest.mark.e2e
def test_help_is_the_same_through_the_script(tmp_path):
    env = {**os.environ, "GFLOW_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0 and out.stdout == help_text()
    assert (
        "gflowctl"
        in subprocess.run(
            [sys.executable, "-m", "controller.cli.main", "version"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        ).stdout
    )


@pytest.mark.e2e
def test_apply_answered_by_gflowd_needs_no_models(tmp_path):
    """The review's client side (ask) and the apply verb load neither pydantic nor the model
    documents: gflowd judges the manifest."""
    code = (
        "import sys\nbefore = set(sys.modules)\nimport controller.cli.apply, controller.client.review\n"
        "print(sorted(m for m in ('controller.model.documents', 'pydantic') "
        "if m in sys.modules and m not in before))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.e2e
def test_apply_imports_no_dataclasses_or_tempfile(tmp_path):
    """gflowctl apply answered by gflowd writes through plain classes: ``dataclasses`` (with the
    ``inspect`` it loads, ~10 ms) stays out of its start-up, and so do the client's public objects;
    its atomic writes name their temp files themselves (``tempfile`` loads shutil and random)."""
    code = (
        "import sys\nbefore = set(sys.modules)\n"
        "import controller.cli.main, controller.cli.apply, controller.client.write.manifests, controller.client.review\n"
        "print(sorted(m for m in ('dataclasses', 'inspect', 'controller.client.read.objects', 'tempfile', 'shutil', "
        "'random') "
        "if m in sys.modules and m not in before))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_apply_from_a_project_folder_with_gflowd_loads_no_yaml_parser(home, gflowd, tmp_path):
    """gflowd checks the manifest and places its workingDir (it has ruamel loaded): a new job
    applied from outside the spec dir is stored without gflowctl importing ruamel at all."""
    gflowd()
    proj = tmp_path / "proj"
    proj.mkdir()
    manifest = proj / "job.yaml"
    manifest.write_text(
        "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: lean  # mine\nspec:\n  command: [sleep, '30']\n"
    )
    loaded, probe = gflowctl_imports(["apply", "-f", str(manifest)], HEAVY, {**os.environ, "GFLOW_HOME": str(home)})
    assert probe.returncode == 0, probe.stderr
    assert loaded[0] == "0" and "ruamel.yaml" not in loaded[1:] and "dataclasses" not in loaded[1:], loaded
    stored = (home / "jobs" / "lean.yaml").read_text()
    assert "name: lean  # mine\n" in stored and f'workingDir: "{proj}"' in stored, stored


# what a verb gflowd answers for must not load: the models and YAML parser (gflowd's), and the
# standard modules run's start-up once paid for (argparse, dataclasses with inspect, typing, ...)
LEAN_HEAVY = (
    "pydantic",
    "ruamel.yaml",
    "controller.model.documents",
    "argparse",
    "dataclasses",
    "inspect",
    "typing",
    "tempfile",
    "secrets",
    "shutil",
    "selectors",
)


def _lean(home, cwd, *argv: str) -> list[str]:
    """Exit code, then which of LEAN_HEAVY ``gflowctl ARGV`` imported."""
    return gflowctl_imports(list(argv), LEAN_HEAVY, {**os.environ, "GFLOW_HOME": str(home)}, cwd)[0]


def test_run_and_apply_answered_by_gflowd_load_no_models_nor_yaml(home, gflowd, tmp_path):
    """gflowd judges what run and apply submit (it has the models and ruamel loaded): in every
    form, run imports neither, nor the standard modules its start-up no longer needs; apply,
    new or re-applied unchanged, loads neither the models nor a YAML parser (nor argparse: its
    plain form is read without it)."""
    gflowd()
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n# GFLOW --gpus 1\n#SBATCH --time=10\nsleep 300\n")
    script.chmod(0o755)
    forms = {
        "a command": ["run", "--name", "lean-cmd", "--", "sleep", "300"],
        "flags": ["run", "-G", "1", "-e", "A=1", "--time", "1h", "-l", "team=x", "--mem", "1G", "--", "sleep", "300"],
        "a script": ["run", str(script), "--epochs", "3"],
        "an array": ["run", "--array", "0-3%2", "--", "sleep", "300"],
        "a sweep": ["run", "--param", "lr=0.1,0.01", "--after", "@", "--", "sleep", "300"],
        "a bad flag": ["run", "--gpus", "two", "--", "sleep", "300"],
        "instance options": ["--home", str(home), "run", "-q", "--", "sleep", "300"],
    }
    for form, argv in forms.items():
        loaded = _lean(home, tmp_path, *argv)
        assert loaded and loaded[1:] == [], (form, loaded)
        assert loaded[0] == ("1" if form == "a bad flag" else "0"), (form, loaded)

    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: again\nspec:\n  command: [sleep, '300']\n"
    )
    for time_ in ("new", "unchanged"):
        loaded = _lean(home, tmp_path, "apply", "-f", str(manifest))
        heavy = {"pydantic", "ruamel.yaml", "controller.model.documents", "argparse"} & set(loaded)
        assert loaded[0] == "0" and not heavy, (time_, loaded)
    assert (home / "jobs" / "again.yaml").exists()


def test_run_and_apply_import_no_pathlib_nor_ctypes(home, gflowd, tmp_path):
    """pathlib (with urllib.parse, ipaddress and fnmatch: ~4 ms of a ~40 ms start) stays out of run
    and apply of a new job: their Home and paths are LeanPaths (util/lean_path.py); and so does
    ctypes (~2 ms): the new manifest's no-replace rename calls renameat2 through ``_ctypes``."""
    gflowd()
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n# GFLOW --gpus 1\nsleep 300\n")
    manifest = tmp_path / "job.yaml"
    manifest.write_text("metadata: {name: plain}\nspec:\n  command: [sleep, '300']\n")
    (tmp_path / "other.yaml").write_text("metadata: {name: other}\nspec:\n  command: [sleep, '300']\n")
    env = {**os.environ, "GFLOW_HOME": str(home)}
    for argv in (
        ["run", "--name", "cmd", "--", "sleep", "300"],
        ["run", "train.sh"],
        ["apply", "-f", "job.yaml"],
        ["--home", str(home), "apply", "-f", str(tmp_path / "other.yaml"), "--dry-run"],
    ):
        loaded, probe = gflowctl_imports(argv, ("pathlib", "urllib.parse", "ctypes"), env, tmp_path, site=False)
        assert loaded == ["0"], (argv, loaded, probe.stderr)
    assert (home / "jobs" / "plain.yaml").exists() and (home / "jobs" / "cmd.yaml").exists()


def test_the_python_clients_submit_answered_by_gflowd_loads_no_models_nor_yaml(home, gflowd, tmp_path):
    gflowd()
    code = (
        "import sys\nbefore = set(sys.modules)\nfrom controller.client import Client\n"
        f"c = Client(home={str(home)!r})\n"
        "c.submit(['sleep', '300'], name='from-python')\n"
        "c.sweep(['sleep', '300'], indices='0-3', name='array-from-python')\n"
        "print(sorted(m for m in ('pydantic', 'ruamel.yaml', 'controller.model.documents') "
        "if m in sys.modules and m not in before))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert (home / "jobs" / "from-python.yaml").exists() and (home / "jobs" / "array-from-python.yaml").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["apply", "-f", "a.yaml"],
        ["apply", "-f", "a.yaml", "--filename", "b/", "-R", "--dry-run"],
        ["apply", "--recursive", "-f", "-"],
        ["--home", "/h", "apply", "-f", "a.yaml"],
        ["--home=/h", "--spec-dir", "/s", "apply", "-f", "a.yaml", "--home", "/h2"],
        ["apply", "--spec-dir", "/s", "-f", "a.yaml"],
    ],
)
def test_apply_read_without_argparse_reads_what_argparse_reads(argv):
    from controller.cli.main import _plain_apply, _verb_position

    plain = _plain_apply(argv, _verb_position(argv))
    assert plain is not None
    home, spec_dir, args = plain
    parsed = build_parser("apply").parse_args(argv)
    assert (home, spec_dir) == (parsed.home, parsed.spec_dir)
    assert (args.filename, args.recursive, args.dry_run) == (parsed.filename, parsed.recursive, parsed.dry_run)


@pytest.mark.parametrize(
    "argv",
    [
        ["apply"],  # argparse says -f is required
        ["apply", "-f"],
        ["apply", "-f", "--dry-run"],
        ["apply", "-fa.yaml"],
        ["apply", "--filename=a.yaml"],
        ["apply", "-Rf", "a.yaml"],
        ["apply", "--dry", "-f", "a.yaml"],  # argparse's abbreviations
        ["apply", "-f", "a.yaml", "extra"],
        ["--home", "apply", "-f", "a.yaml"],
    ],
)
def test_apply_forms_argparse_must_read_are_left_to_it(argv):
    from controller.cli.main import _plain_apply, _verb_position

    position = _verb_position(argv)
    assert position is None or _plain_apply(argv, position) is None


@pytest.mark.parametrize(
    "before, expected",
    [
        ([], (None, None)),
        (["--home", "/h"], ("/h", None)),
        (["--home=/h", "--spec-dir", "/s"], ("/h", "/s")),
        (["--home", "/a", "--home", "/b"], ("/b", None)),
        (["--home", "-"], None),  # left to argparse (it takes "-" as a value)
        (["--home", "--spec-dir"], None),  # argparse: --home expected one argument
        (["--home="], None),
    ],
)
def test_run_reads_the_instance_options_before_it_as_argparse_does(before, expected):
    from controller.cli.main import _instance_options

    assert _instance_options(before) == expected
    if expected is not None:
        parsed = build_parser("run").parse_args(before)
        assert (parsed.home, parsed.spec_dir) == expected


_COMPILE_PROBE = (
    "import re, sys\n"
    "seen = []\n"
    "real = re._compile\n"
    "def spy(pattern, flags):\n"
    "    seen.append(getattr(pattern, 'pattern', pattern))\n"
    "    return real(pattern, flags)\n"
    "re._compile = spy\n"
    "before = set(sys.modules)\n"
    "from controller.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "print(repr((code, sorted(m for m in ('signal', 'shlex') if m in sys.modules and m not in before), seen)))\n"
)


def test_plain_run_and_apply_compile_and_import_only_what_they_use(home, gflowd, tmp_path):
    """``run -- CMD`` and ``apply -f`` of a new job compile none of the patterns only scripts, sbatch
    directives, MIG profiles, quantities, durations or YAML errors need, nor yamlio's escape class
    (~0.5-1 ms alone), and import neither ``signal`` nor ``shlex``: each was paid at every start."""
    import ast

    from controller.api import submit, units
    from controller.client.write import precheck
    from controller.model import mig
    from controller.util import yamlio

    lazy = [submit._GFLOW_RE, submit._SBATCH_RE, submit._SLURM_TIME, submit._SLURM_MEM, units._QUANTITY]
    lazy += [units._DURATION_PART, mig.MIG_PROFILE, precheck._PYTHON_LINE, yamlio._NOT_YAML_PRINTABLE]
    lazy += [yamlio._DUPLICATE_VALUES, yamlio._BRACKETS]
    lazy = [getattr(p, "pattern", p) for p in lazy]  # compiled objects before this change
    gflowd()
    manifest = tmp_path / "plain.yaml"
    manifest.write_text("metadata: {name: plain}\nspec:\n  command: [sleep, '300']\n")
    (tmp_path / "other.yaml").write_text("metadata: {name: other}\nspec:\n  command: [sleep, '300']\n")
    for argv in (["run", "--name", "cmd", "--", "sleep", "300"], ["apply", "-f", str(manifest)]):
        out = subprocess.run(
            [sys.executable, "-c", _COMPILE_PROBE, *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "GFLOW_HOME": str(home)},
            cwd=tmp_path,
            timeout=60,
        )
        code, imported, seen = ast.literal_eval(out.stdout.splitlines()[-1])
        assert code == 0, out.stderr
        assert imported == [], (argv, imported)
        assert [p for p in lazy if p in seen] == [], argv
