"""``gflowctl get`` written plainly (``get jobs -o wide``) is read without argparse (cli/main.py
``_plain_get``: argparse and what it loads were a sixth of ``get jobs``' time). Checked: the plain
reader gives exactly the arguments argparse gives, hands anything else to argparse (which words the
errors), and against a real gflowd's home each listing prints byte for byte what the same listing
read by argparse prints."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from helpers import gflowctl_imports
from test_get_prepared import _settled_home, ctl

from controller.cli.main import _plain_get, build_parser


def _by_argparse(argv: list[str]) -> dict:
    """What ``run`` makes of ``argv`` through argparse: names after flags join the names."""
    args, extra = build_parser("get").parse_known_args(argv)
    if extra:
        args.names = [*args.names, *extra]
    return vars(args)


PLAIN = [
    ["get", "jobs"],
    ["get", "job", "a", "b"],
    ["get", "jobs", "-o", "wide"],
    ["get", "jobs", "a", "-o", "name", "b"],
    ["get", "-o", "json", "jobs", "a"],
    ["get", "jobs", "-A", "--tree", "-o", "wide"],
    ["get", "jobs", "-l", "team=nlp", "--selector", "x!=y", "--phase", "R,PD", "--phase", "Failed"],
    ["get", "jobs", "-u", "root", "--user", "a,b", "--me", "-w"],
    ["get", "jobs", "--all", "--watch", "--output", "yaml", "-o", "name"],
    ["get", "events", "--for", "job/a"],
    ["get", "gpus"],
    ["get", "job/a", "job/b"],
    ["--home", "/h", "get", "jobs", "--spec-dir", "/s"],
    ["--home=/h", "--spec-dir=/s", "get", "jobs", "--home", "/h2"],
]

NOT_PLAIN = [
    ["get"],  # no kind: argparse's error
    ["get", "jobs", "-o"],
    ["get", "jobs", "-o", "bad"],
    ["get", "jobs", "-o", "-A"],
    ["get", "jobs", "--output=name"],
    ["get", "jobs", "-oname"],
    ["get", "jobs", "--al"],
    ["get", "jobs", "-l", ""],
    ["get", "jobs", "--", "a"],
    ["get", "jobs", "-h"],
    ["get", "jobs", "--nope"],
    ["get", "jobs", "--home"],
    ["--home", "get", "jobs"],
]


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_a_plain_get_reads_as_argparse_reads_it(argv):
    position = argv.index("get")
    plain = _plain_get(argv, position)
    assert plain is not None
    home, spec_dir, args = plain
    assert {**vars(args), "home": home, "spec_dir": spec_dir} == _by_argparse(argv)


@pytest.mark.parametrize("argv", NOT_PLAIN, ids=" ".join)
def test_anything_else_is_left_to_argparse(argv):
    assert _plain_get(argv, argv.index("get")) is None


def _argparse_form(argv: list[str], home: Path) -> list[str]:
    """The same listing in words ``_plain_get`` leaves to argparse: ``--flag=value``, switches
    abbreviated, ``--home=HOME`` after the verb."""
    longs = {"-o": "--output", "-l": "--selector", "-u": "--user", "--phase": "--phase"}
    switches = {"-A": "--al", "--tree": "--tre"}
    out, i = [], 0
    while i < len(argv):
        word = argv[i]
        if word in longs:
            out.append(f"{longs[word]}={argv[i + 1]}")
            i += 2
            continue
        out.append(switches.get(word, word))
        i += 1
    return [*out, f"--home={home}"]


LISTINGS = [
    ["get", "jobs"],
    ["get", "jobs", "-A"],
    ["get", "jobs", "-o", "wide"],
    ["get", "jobs", "--tree"],
    ["get", "jobs", "--tree", "-o", "wide"],
    ["get", "jobs", "-o", "name"],
    ["get", "jobs", "-o", "json"],
    ["get", "jobs", "-o", "yaml"],
    ["get", "jobs", "-l", "team=nlp", "-o", "wide"],
    ["get", "jobs", "--phase", "R,pending"],
    ["get", "jobs", "-u", "root", "-o", "name"],
    ["get", "jobs", "runs", "gone", "-o", "json"],
    ["get", "jobs", "-o", "bad"],
    ["get", "gpus"],
]
AGE = re.compile(r"(?<![\w-])\d+(s|m\d+s|m|h\d+m|h|d\d+h|d)(?![\w-])")


@pytest.mark.e2e
def test_each_listing_prints_what_argparse_read_listing_prints(home, gflowd, fake_gpus):
    _settled_home(home, gflowd, fake_gpus)
    for argv in LISTINGS:
        other = _argparse_form(argv, home)
        assert _plain_get(other, 0) is None, other  # the comparison really goes through argparse
        plain, parsed = ctl(home, *argv), ctl(home, *other)
        assert (plain.returncode, plain.stderr) == (parsed.returncode, parsed.stderr), argv
        # an AGE may tick over between the two runs; nothing else may differ
        assert AGE.sub("AGE", plain.stdout) == AGE.sub("AGE", parsed.stdout), argv
        assert plain.stdout.strip() or argv[-1] == "bad", argv


PLAIN_GET_HEAVY = ("argparse", "gettext", "locale", "shutil", "controller.api.labels")


@pytest.mark.e2e
@pytest.mark.parametrize("argv", [["get", "jobs"], ["get", "jobs", "-A", "-o", "name"], ["get", "job/a", "-o", "wide"]])
def test_a_plain_get_jobs_loads_no_argument_parser(home, argv):
    """argparse, and the gettext, locale and shutil it loads: ~9 ms of a ~60 ms ``get jobs``;
    the label selector's parser only for ``-l``."""
    loaded, probe = gflowctl_imports(argv, PLAIN_GET_HEAVY, {**os.environ, "GFLOW_HOME": str(home)})
    assert loaded[1:] == [], (loaded, probe.stderr)
