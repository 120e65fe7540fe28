"""Property-based tests (hypothesis) for the manifest loader and admission.

Whatever the text or data, the loader never raises: every document becomes an admitted Job (or
Sweep) or a Rejection whose message names what to fix — a field path (``spec.x: ...``), the
document (``document is ...``), or the file (a YAML error with its source).
"""

from __future__ import annotations

import copy
import os
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from controller.api.validation import validate_any
from controller.decide.admission import admit
from controller.model.documents import AdmittedJob, Rejection
from controller.observe.manifests import ManifestStore

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# what a Rejection's message starts with: a field path (its first part a known field or one of the
# document's own keys), the document, or the file's own problem
ROOTS = ("apiVersion", "kind", "metadata", "spec", "status")
OTHER_PREFIXES = ("document is ", "YAML syntax error: ", "file is ", "cannot read the file", "document ")


def names_a_field(message: str, data) -> bool:
    message = re.sub(r"^\d+ errors: ", "", message)  # several: each names its field; the first is checked
    if message.startswith(OTHER_PREFIXES):
        return True
    roots = set(ROOTS) | ({str(k) if k != "" else '""' for k in data} if isinstance(data, dict) else set())
    return any(message.startswith(root) and message[len(root) : len(root) + 1] in (".", "[", ":") for root in roots)


VALID = {
    "apiVersion": "gflow.dev/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "train", "labels": {"team": "vision"}},
    "spec": {
        "command": ["python", "train.py", "--lr", "0.01"],
        "workingDir": "/tmp",
        "env": {"WANDB_MODE": "offline"},
        "resources": {"gpus": 2, "gpuMemory": "20Gi", "memory": "16Gi"},
        "sharing": "Shared",
        "priority": 10,
        "timeLimit": "4h30m",
        "backoffLimit": 1,
        "dependsOn": [{"job": "prep", "condition": "Succeeded"}],
        "suspend": False,
        "cancelled": False,
    },
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["", "Job", "Sweep", "16Gi", "-5s", "4h", "Shared", "a/b", "..", "x" * 64, "$(touch x)"]),
)
keys = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "apiVersion",
            "kind",
            "metadata",
            "name",
            "spec",
            "command",
            "script",
            "resources",
            "gpus",
            "env",
            "timeLimit",
            "priority",
            "sharing",
            "gpuMemory",
            "dependsOn",
            "matrix",
            "template",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=25,
)


def _check(results: list, source: str, data=None) -> None:
    assert results, "a document yields at least one result"
    for result in results:
        if isinstance(result, Rejection):
            assert names_a_field(result.message, data), f"message names no field: {result.message!r}"
            assert source in result.message, f"message does not name the file: {result.message!r}"
        else:
            assert isinstance(result, AdmittedJob) or type(result).__name__ == "AdmittedSweep", result


def _validate(data) -> list:
    return validate_any(data, source="jobs/p.yaml", path="/x/jobs/p.yaml", stem="p", single=True, text=None)


@SETTINGS
@given(data=values)
def test_any_data_is_admitted_or_rejected_naming_a_field(data):
    results = _validate(data)
    _check(results, "jobs/p.yaml", data)
    admit(results, {}, controller_uid=0)  # and admission across documents never raises either


def _mutations():
    """A path into VALID and what to do there: replace the value, delete the key, or add a key."""
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                paths.append(path + (key,))
                walk(value, path + (key,))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                paths.append(path + (index,))
                walk(value, path + (index,))

    walk(VALID, ())
    return st.tuples(st.sampled_from(paths), st.sampled_from(["replace", "delete", "add"]), values, keys)


@SETTINGS
@given(mutation=_mutations())
def test_mutations_of_a_valid_manifest_are_admitted_or_rejected_naming_a_field(mutation):
    path, action, value, new_key = mutation
    doc = copy.deepcopy(VALID)
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if action == "replace":
        parent[last] = value
    elif action == "delete":
        del parent[last]
    elif isinstance(parent, dict):
        parent[new_key] = value
    results = _validate(doc)
    _check(results, "jobs/p.yaml", doc)


_yaml = YAML(typ="safe")


@SETTINGS
@given(data=values)
def test_any_yaml_document_through_the_store_never_raises(tmp_path_factory, data):
    spec = tmp_path_factory.mktemp("props")
    from io import StringIO

    buffer = StringIO()
    try:
        _yaml.dump(data, buffer)
    except Exception:  # e.g. a float the emitter refuses: not a document we can write
        return
    (spec / "p.yaml").write_text(buffer.getvalue())
    store = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}")
    store.scan()
    docs = store.documents()
    if data is None:
        assert docs == []  # an empty document is nothing, not an error
    else:
        _check(docs, "jobs/p.yaml", data)


@SETTINGS
@given(
    text=st.one_of(
        st.text(max_size=300),
        st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
        st.lists(
            st.sampled_from(
                [
                    "a:",
                    " b:",
                    "- ",
                    "&x ",
                    "*x",
                    "[",
                    "]",
                    "{",
                    "}",
                    "---\n",
                    "\n",
                    ":",
                    "'",
                    '"',
                    "!!python/object:os.system",
                    "kind: Job\n",
                    "spec:\n",
                    "  command: [x]\n",
                    "\t",
                    "%YAML 1.2\n",
                ]
            ),
            max_size=40,
        ).map("".join),
    )
)
def test_any_text_through_the_store_never_raises(tmp_path_factory, text):
    spec = tmp_path_factory.mktemp("props")
    path = spec / "p.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    store = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}")
    store.scan()
    try:
        parsed = _yaml.load(text)
    except Exception:
        parsed = None
    for doc in store.documents():
        _check([doc], "jobs/p.yaml", parsed)
    assert os.path.exists(path)  # never touched the file


def test_the_message_pattern_can_fail():
    bad = Rejection("p", "Invalid", "something went wrong (jobs/p.yaml)", "jobs/p.yaml")
    try:
        _check([bad], "jobs/p.yaml")
    except AssertionError as exc:
        assert "names no field" in str(exc)
    else:
        raise AssertionError("a message naming no field passed the check")
    _check([Rejection("p", "Invalid", "spec.x: bad (jobs/p.yaml line 3)", "jobs/p.yaml")], "jobs/p.yaml")
