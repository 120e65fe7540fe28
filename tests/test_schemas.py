"""crd-schemas/ is derived from the models and must not drift; example manifests must be valid Jobs;
the status files the controller writes must match the JobStatus model."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controller.api.validation import validate_any, validate_document
from controller.decide.admission import admit
from controller.model.documents import AdmittedJob, Rejection
from controller.util.yamlio import load_all, load_one

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "manifests" / "examples"


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_schemas", ROOT / "hack" / "gen_schemas.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return gen.generate()


# --- drift -----------------------------------------------------------------------------------------


def test_generator_produces_the_schemas_and_the_manifest_reference(generated):
    assert sorted(generated) == [
        "crd-schemas/job.crd.yaml",
        "crd-schemas/job.schema.json",
        "crd-schemas/jobstatus.schema.json",
        "crd-schemas/reservation.crd.yaml",
        "crd-schemas/reservation.schema.json",
        "crd-schemas/sweep.crd.yaml",
        "crd-schemas/sweep.schema.json",
        "docs/manifest.md",
    ]
    for text in generated.values():
        assert text.endswith("\n") and not text.endswith("\n\n")


@pytest.mark.parametrize(
    "rel",
    [
        "crd-schemas/job.schema.json",
        "crd-schemas/jobstatus.schema.json",
        "crd-schemas/job.crd.yaml",
        "crd-schemas/sweep.schema.json",
        "crd-schemas/sweep.crd.yaml",
        "crd-schemas/reservation.schema.json",
        "crd-schemas/reservation.crd.yaml",
        "docs/manifest.md",
    ],
)
def test_committed_schema_matches_the_models(generated, rel):
    path = ROOT / rel
    assert path.exists(), f"{rel} is missing: run python hack/gen_schemas.py"
    assert path.read_text(encoding="utf-8") == generated[rel], (
        f"{rel} is out of date with the models: run python hack/gen_schemas.py"
    )


def test_generation_is_deterministic(generated):
    assert gen.generate() == generated


@pytest.mark.e2e
def test_check_mode_passes_on_the_committed_tree():
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen_schemas.py"), "--check"], capture_output=True, text=True
    )
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.e2e
def test_check_mode_fails_with_one_line_naming_the_stale_file(tmp_path, generated):
    for rel, text in generated.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    stale = tmp_path / "crd-schemas" / "jobstatus.schema.json"
    stale.write_text(stale.read_text().replace('"phase"', '"stage"'))
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen_schemas.py"), "--check", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("crd-schemas/jobstatus.schema.json is out of date")
    assert "python hack/gen_schemas.py" in lines[0]
    assert gen.stale(tmp_path) == ["crd-schemas/jobstatus.schema.json"]


def test_check_mode_names_a_missing_file(tmp_path, capsys):
    assert gen.stale(tmp_path) == list(gen.generate())  # nothing there: all stale
    assert gen.main(["--check", "--root", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        "crd-schemas/job.schema.json (and 7 more) is missing; run: python hack/gen_schemas.py\n"
    )


def test_write_mode_writes_what_check_mode_accepts(tmp_path, capsys):
    assert gen.main(["--root", str(tmp_path)]) == 0
    assert gen.stale(tmp_path) == []
    assert "wrote crd-schemas/job.crd.yaml" in capsys.readouterr().out


# --- the CRD is a structural schema ----------------------------------------------------------------


def _walk(node: Any, path: str = ""):
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, f"{path}[{index}]")


@pytest.fixture(scope="module")
def crd(generated) -> dict:
    return load_one(generated["crd-schemas/job.crd.yaml"])


def test_crd_envelope(crd):
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == "jobs.gflow.dev"
    spec = crd["spec"]
    assert spec["group"] == "gflow.dev"
    assert (spec["names"]["kind"], spec["names"]["plural"]) == ("Job", "jobs")
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)


def test_crd_schema_is_structural(crd):
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        if not isinstance(node, dict):
            continue
        assert "$ref" not in node and "$defs" not in node and "const" not in node, path
        if "properties" in node:
            assert "additionalProperties" not in node, path
        for option in node.get("anyOf", []):
            assert option.get("type") != "null", path
            assert "description" not in option and "default" not in option, path

    # every field declares its type, or is an int-or-string
    def fields(node, path="spec"):
        for name, sub in node.get("properties", {}).items():
            yield f"{path}.{name}", sub
            yield from fields(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            yield f"{path}[]", node["items"]
            yield from fields(node["items"], f"{path}[]")

    for path, node in fields(schema):
        assert "type" in node or node.get("x-kubernetes-int-or-string") is True, path


def test_crd_spec_fields_are_the_models_fields(crd):
    from controller.api.job import JobSpec, Resources

    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    aliases = [f.alias for f in JobSpec.model_fields.values()]
    assert list(spec["properties"]) == aliases
    assert list(spec["properties"]["resources"]["properties"]) == [f.alias for f in Resources.model_fields.values()]
    assert spec["properties"]["resources"]["properties"]["gpuMemory"]["x-kubernetes-int-or-string"] is True
    assert spec["properties"]["command"]["nullable"] is True


# --- a small JSON Schema (2020-12 subset) checker: enough for what pydantic emits -------------------

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def schema_errors(value: Any, schema: dict, root: dict, path: str = "") -> list[str]:
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return schema_errors(value, root["$defs"][name], root, path)
    where = path or "document"
    if "anyOf" in schema and all(schema_errors(value, option, root, path) for option in schema["anyOf"]):
        return [f"{where}: matches no alternative"]
    if "type" in schema and not _TYPES[schema["type"]](value):
        return [f"{where}: not {schema['type']}"]
    errors = []
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: not one of {schema['enum']}")
    if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
        errors.append(f"{where}: below {schema['minimum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: too short")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: does not match {schema['pattern']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: too few items")
        for index, item in enumerate(value):
            if "items" in schema:
                errors += schema_errors(item, schema["items"], root, f"{path}[{index}]")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: {key} is required")
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if key in properties:
                errors += schema_errors(item, properties[key], root, sub)
            elif schema.get("additionalProperties") is False:
                errors.append(f"{sub}: not allowed")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += schema_errors(item, schema["additionalProperties"], root, sub)
    return errors


@pytest.fixture(scope="module")
def job_schema(generated) -> dict:
    return json.loads(generated["crd-schemas/job.schema.json"])


def test_schema_checker_can_reject(job_schema):
    """The checker below is only trusted because it says no to what the models say no to."""
    bad = {"spec": {"command": ["x"], "resources": {"gpus": -1}, "sharing": "Sometimes", "bogus": 1}}
    assert sorted(schema_errors(bad, job_schema, job_schema)) == [
        "spec.bogus: not allowed",
        "spec.resources.gpus: below 0",
        "spec.sharing: not one of ['Exclusive', 'Shared']",
    ]


MODEL_VALID = [
    pytest.param({"spec": {"command": ["python", "train.py", "--lr", "0.01"]}}, id="command"),
    pytest.param({"spec": {"script": "echo hi\n"}}, id="script"),
    pytest.param(
        {
            "apiVersion": "gflow.dev/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "train", "labels": {"team": "vision"}},
            "spec": {
                "command": ["python", "train.py"],
                "workingDir": "~/proj",
                "env": {"WANDB_MODE": "offline"},
                "resources": {"gpus": 2, "gpuType": "H100", "gpuMemory": "20Gi", "memory": "16Gi"},
                "priority": 10,
                "timeLimit": "4h30m",
                "backoffLimit": 1,
                "dependsOn": [{"job": "preprocess", "condition": "Succeeded"}],
                "startAfter": "2026-12-01T22:00:00",
            },
        },
        id="spec-example",
    ),
    pytest.param({"spec": {"command": ["x"], "timeLimit": 90, "resources": {"memory": 1024}}}, id="numbers"),
    pytest.param(
        {"spec": {"command": ["x"], "sharing": "Shared", "resources": {"gpus": 1, "gpuMemory": "10Gi"}}}, id="shared"
    ),
    # the shorthands the models document and accept must be accepted by the published schema too
    pytest.param({"spec": {"command": ["x"], "dependsOn": ["preprocess"]}}, id="dependsOn-bare-name"),
    pytest.param({"spec": {"command": ["sleep", 30]}}, id="command-integer-argument"),
    pytest.param({"spec": {"command": ["x"], "env": {"WORKERS": 4, "DEBUG": True}}}, id="env-integer-and-boolean"),
]


@pytest.mark.parametrize("document", MODEL_VALID)
def test_what_the_models_admit_the_json_schema_accepts(document, job_schema):
    """Editors and ``gflowctl explain`` use job.schema.json: it must not reject valid manifests."""
    admitted = validate_document(document, source="jobs/t.yaml", path="/h/jobs/t.yaml", stem="t", single=True)
    assert isinstance(admitted, AdmittedJob), admitted
    assert schema_errors(document, job_schema, job_schema) == []


# --- example manifests -----------------------------------------------------------------------------


def _example_files() -> list:
    files = sorted(EXAMPLES.glob("**/*.yaml")) + sorted(EXAMPLES.glob("**/*.yml"))
    if not files:
        return [
            pytest.param(None, marks=pytest.mark.skip(reason="manifests/examples/ holds no manifests yet"), id="none")
        ]
    return [pytest.param(f, id=str(f.relative_to(EXAMPLES))) for f in files]


def _document_kind(data: Any) -> str | None:
    """What an example document is: a Job (``kind: Job``, or a manifest that omits kind), another
    manifest kind (e.g. Sweep), a fake-GPU description (``gpus:``), or None for anything else."""
    if not isinstance(data, dict):
        return None
    if "kind" in data:
        return str(data["kind"])
    if {"apiVersion", "metadata", "spec"} & set(data):
        return "Job"
    if "gpus" in data:
        return "FakeGPUs"
    return None


def _example_jobs(path: Path) -> list:
    """(text, index, data, single) for every Job document of an example file."""
    text = path.read_text(encoding="utf-8")
    docs = load_all(text)
    single = sum(d is not None for d in docs) == 1
    return [(text, i, d, single) for i, d in enumerate(docs) if d is not None and _document_kind(d) in ("Job", "Sweep")]


@pytest.mark.parametrize("path", _example_files())
def test_example_manifest_is_valid(path: Path):
    from controller.observe.gpus.inventory import parse_fake_gpus

    source = f"manifests/examples/{path.relative_to(EXAMPLES)}"
    text = path.read_text(encoding="utf-8")
    kinds = {_document_kind(d) for d in load_all(text) if d is not None}
    if kinds == {"FakeGPUs"}:
        assert parse_fake_gpus(text), f"{source}: no GPUs"  # raises ValueError naming the bad field
        return
    jobs = _example_jobs(path)
    for text, index, data, single in jobs:
        result = validate_any(
            data,
            source=source,
            path=str(path),
            stem=path.name.rsplit(".", 1)[0],
            single=single,
            doc_index=index,
            text=text,
        )[0]
        assert not isinstance(result, Rejection), f"{source}: {result.message}"
    if not jobs:
        pytest.skip(f"{source} holds no Job or Sweep document (kinds: {sorted(map(str, kinds))})")


def test_example_manifests_have_distinct_names():
    documents = []
    for path in sorted(EXAMPLES.glob("**/*.y*ml")):
        for text, index, data, single in _example_jobs(path):
            documents.extend(
                validate_any(
                    data,
                    source=str(path.relative_to(ROOT)),
                    path=str(path),
                    stem=path.name.rsplit(".", 1)[0],
                    single=single,
                    doc_index=index,
                    text=text,
                )
            )
    if not documents:
        pytest.skip("manifests/examples/ holds no Job manifests yet")
    result = admit(documents)
    assert result.duplicates == {}
    assert result.warnings == []
    assert result.rejected == {}


# --- status files match the JobStatus model --------------------------------------------------------


def _statuses() -> dict:
    """Status documents as the controller writes them, for a GPU job, a CPU job and a retrying one."""
    from controller.decide.reconcile import reconcile
    from controller.model.gpus import Gpu
    from controller.model.plan import RunObservation, Snapshot

    def job(name, **spec):
        spec.setdefault("command", ["true"])
        return validate_document(
            {"metadata": {"name": name}, "spec": spec},
            source=f"jobs/{name}.yaml",
            path=f"/h/jobs/{name}.yaml",
            stem=name,
            single=True,
        )

    jobs = [
        job("gpu", resources={"gpus": 2}),
        job("cpu"),
        job("retry", backoffLimit=1),
        job("huge", resources={"gpus": 9}),
    ]
    gpus = [Gpu(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", 80 * 2**30) for i in range(2)]
    first = reconcile(Snapshot(admit(jobs), {}, {}, gpus), 1000.0)
    runs = {
        "gpu": RunObservation("gpu", 1, 5, 1000.0, True),
        "cpu": RunObservation("cpu", 1, 6, 1000.0, True),
        "retry": RunObservation(
            "retry", 1, 7, 1000.0, False, 1, None, 1001.0, usage={"cpuSeconds": 0.25, "peakMemoryBytes": 52428800}
        ),
    }
    second = reconcile(Snapshot(admit(jobs), first.states, runs, gpus), 1001.0)
    phases = {name: (state.phase, state.reason) for name, state in second.states.items()}
    assert phases == {
        "gpu": ("Running", "Started"),
        "cpu": ("Running", "Started"),
        "retry": ("Pending", "BackOff"),
        "huge": ("Pending", "Unschedulable"),
    }
    assert second.states["gpu"].device_uuids == ["GPU-0", "GPU-1"]
    assert second.states["retry"].to_status()["status"]["usage"] == {"cpuSeconds": 0.25, "peakMemoryBytes": 52428800}
    return {name: state.to_status() for name, state in second.states.items()}


@pytest.mark.parametrize("name", ["gpu", "cpu", "retry", "huge"])
def test_status_written_by_the_controller_matches_the_jobstatus_model(name):
    from controller.api.status import JobStatus

    status = _statuses()[name]
    JobStatus.model_validate(status)  # raises on a field the model (and jobstatus.schema.json) lacks


def test_status_file_keys_are_the_ones_the_spec_documents():
    """SPEC.md section 4 spells the UUID list ``deviceUUIDs``; the schema must use that key."""
    schema = json.loads(gen.generate()["crd-schemas/jobstatus.schema.json"])
    keys = set(schema["$defs"]["JobStatusFields"]["properties"])
    assert {"phase", "reason", "message", "devices", "deviceUUIDs", "observedGeneration", "queuePosition"} <= keys
