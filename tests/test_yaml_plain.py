"""The plain-YAML reader (controller/util/yaml_plain.py) gives exactly ruamel's data or nothing:
on the repo's manifests, on hand-picked traps (words YAML types, numbers in other forms, nulls,
comments, escapes), and on random documents built from the pieces manifests are made of."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from controller.util import yamlio
from controller.util.yaml_plain import plain_documents

ROOT = Path(__file__).resolve().parents[1]


def ruamel_documents(text: str):
    try:
        return list(YAML(typ="safe").load_all(text))
    except Exception as exc:  # any refusal: the plain reader must refuse too
        return exc


def same(a, b) -> bool:
    """Equal, and of the same types all the way down (1 == True, 1 == 1.0 in Python)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def check(text: str) -> bool:
    """The invariant: None, or ruamel's very data. Returns whether the plain reader took it."""
    plain = plain_documents(text)
    if plain is None:
        return False
    expected = ruamel_documents(text)
    assert not isinstance(expected, Exception), f"ruamel refuses {text!r} ({expected}), the plain reader took it"
    assert same(plain, expected), f"{text!r}: plain {plain!r} != ruamel {expected!r}"
    return True


TAKEN = [
    "metadata: {name: d-00001}\nspec:\n  command: ['true']\n",
    'metadata:\n  name: train-3\n  labels: {team: vision, tier: "2"}\nspec:\n  command: [python, train.py, --epochs, "10"]\n'
    "  gpus: 2\n  priority: -5\n  env:\n    FOO: bar\n    PATH_X: /usr/local/bin\n",
    "spec:\n  command:\n    - python\n    - -c\n    - 'print(1)'\n  workingDir: /tmp/x\n",
    "spec:\n  command:\n  - sleep\n  - '60'\nmetadata: {name: s}\n",
    "metadata: {name: a}\nspec:\n  command: [echo, hi there]\n  resources: {gpus: 0}\n",  # "hi there": one scalar
    "a: []\nb: {}\nc: ''\nd: \"\"\ne: 0\nf: -12\n",
    "metadata:\n  annotations: {gflow.dev/environment: /home/u/.env}\n",
    "\n\nkey: value\n\n  \n",  # blank lines anywhere
    "# a job\nmetadata:  # its name\n  name: a   # trailing\n    # indented comment\nspec:\n  command: [x]\n",
]

REFUSED = [
    "a: yes\n",
    "a: No\n",
    "a: on\n",
    "a: TRUE\n",
    "a: null\n",
    "a: ~\n",
    "a:\n",
    "true: 1\n",
    "a: 012\n",
    "a: 0x1F\n",
    "a: 1_000\n",
    "a: 1.5\n",
    "a: .inf\n",
    "a: 1e3\n",
    "a: +3\n",
    "a: 2026-11-29\n",
    "a: 12:30\n",
    "a: 'b' # comment\n",
    "a: b#c\n",
    "a: b\n#c: d\n  e: f\n".replace("#c: d\n", ""),
    "a: 'it''s'\n",
    'a: "tab\\there"\n',
    "a: &x b\nc: *x\n",
    "a: !!str 1\n",
    "a: |\n  text\n",
    "a: >\n  text\n",
    "---\na: b\n",
    "a: b\n---\nc: d\n",
    "a: b\na: c\n",
    "a: [b, [c]]\n",
    "a: {b: [c]}\n",
    "a: [b, ]\n",
    "a: {b: c, b: d}\n",
    "a: 'x, y'\n".replace("'x, y'", "['x, y']"),
    "a: b\n  c: d\n",
    "a:\n  b: c\n c: d\n",
    "  a: b\n",
    "- a\n- b\n",
    "a:\n  - b: c\n",
    "a:\n  -\n",
    "a: http://example.com\n",
    "a: 'bell\x07'\n",
    "\ufeffa: b\n",
    "a\tb: c\n",
    "a: b\r\n",
    "",
    "a: x  y\n",
    "a: b:\n",
]


@pytest.mark.parametrize("text", TAKEN)
def test_plain_manifests_are_read_as_ruamel_reads_them(text):
    assert check(text), f"not taken: {text!r}"


@pytest.mark.parametrize("text", REFUSED)
def test_anything_yaml_may_read_otherwise_is_left_to_ruamel(text):
    assert plain_documents(text) is None


def test_the_repos_manifests_agree_with_ruamel():
    taken = 0
    files = sorted((ROOT / "manifests").rglob("*.yaml"))
    assert files
    for path in files:
        taken += check(path.read_text())
    assert taken >= 0  # most examples hold block scalars (|): ruamel's


def test_random_documents_agree_with_ruamel():
    rng = random.Random(36)
    keys = ["a", "name", "spec", "gpus", "on", "y", "No", "x.y/z", "k-1", "_k", "null", "1a"]
    scalars = [
        "b",
        "hello world",
        "/usr/bin/true",
        "0",
        "-0",
        "7",
        "-42",
        "007",
        "1.0",
        "1e2",
        "0o7",
        "0x7",
        "true",
        "False",
        "yes",
        "OFF",
        "~",
        "null",
        "Null",
        "nan",
        ".nan",
        "inf",
        "-.inf",
        "2026-01-02",
        "1:2",
        "a:b",
        "a=b",
        "+1",
        "-",
        "'q'",
        "'it''s'",
        '"dq"',
        "''",
        '""',
        "'a b'",
        "x,y",
        "[]",
        "{}",
        "[a, 1, 'b']",
        "{k: v, n: 2}",
        "[a,b]",
        "{k:v}",
        "--epochs",
        "-x",
        "-1x",
        "-.5",
        "b # c",
        "b #c",
        "'b' # c",
        "b#c",
        "#c",
        "# c",
        "[ a , b ]",
        "'",
        "a'b",
        "é",
        "'é'",
    ]

    def block(depth: int, indent: int) -> list[str]:
        lines = []
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(keys)
            pad = " " * indent
            roll = rng.random()
            if roll < 0.55 or depth == 0:
                lines.append(f"{pad}{key}: {rng.choice(scalars)}")
            elif roll < 0.8:
                lines.append(f"{pad}{key}:")
                lines.extend(block(depth - 1, indent + rng.choice([1, 2, 4])))
            else:
                lines.append(f"{pad}{key}:")
                dash = indent + rng.choice([0, 2])
                lines.extend(f"{' ' * dash}- {rng.choice(scalars)}" for _ in range(rng.randint(1, 3)))
        return lines

    taken = 0
    for _ in range(6000):
        lines = block(2, 0)
        if rng.random() < 0.1:
            lines.insert(rng.randrange(len(lines) + 1), " " * rng.randint(0, 3))
        taken += check("\n".join(lines) + rng.choice(["\n", "", "\n\n"]))
    assert taken > 250  # the reader takes a fair share, so the comparison means something


def test_load_all_gives_the_plain_readers_answer_or_ruamels():
    assert yamlio.load_all("metadata: {name: a}\nspec:\n  command: ['true']\n") == [
        {"metadata": {"name": "a"}, "spec": {"command": ["true"]}}
    ]
    assert yamlio.load_all("a: true\nb: 1.5\n") == [{"a": True, "b": 1.5}]  # ruamel read these
    with pytest.raises(yamlio.YAMLSyntaxError):
        yamlio.load_all("a: b\na: c\n")  # a duplicate key is ruamel's error, line and all
