"""Admission: one document -> AdmittedJob or Rejection (validate_document); across documents -> who
owns each name (admit). Messages name the field path and the line, as SPEC.md section 4 promises."""

from __future__ import annotations

import pytest

from controller.api.hashes import spec_hashes
from controller.api.validation import validate_document
from controller.decide.admission import admit
from controller.model.documents import AdmittedJob, Rejection
from controller.util.yamlio import load_all

GIB = 2**30


# --- builders --------------------------------------------------------------------------------------


def check_text(text: str, source: str = "jobs/a.yaml", mtime_ns: int = 0) -> list[AdmittedJob | Rejection]:
    """What the store does for one file: parse, then validate every non-empty document."""
    docs = load_all(text)
    stem = source.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    single = sum(d is not None for d in docs) == 1
    return [
        validate_document(
            data,
            source=source,
            path=f"/home/u/.local/share/gflow/{source}",
            stem=stem,
            single=single,
            doc_index=index,
            text=text,
            mtime_ns=mtime_ns,
        )
        for index, data in enumerate(docs)
        if data is not None
    ]


def one(text: str, source: str = "jobs/a.yaml", mtime_ns: int = 0) -> AdmittedJob | Rejection:
    (result,) = check_text(text, source, mtime_ns)
    return result


def admitted(text: str, source: str = "jobs/a.yaml", mtime_ns: int = 0) -> AdmittedJob:
    result = one(text, source, mtime_ns)
    assert isinstance(result, AdmittedJob), result
    return result


def rejected(text: str, source: str = "jobs/a.yaml") -> Rejection:
    result = one(text, source)
    assert isinstance(result, Rejection), f"expected a rejection, got {result}"
    return result


def job_doc(name: str | None = "a", **spec) -> dict:
    spec.setdefault("command", ["true"])
    meta = {} if name is None else {"name": name}
    return {"apiVersion": "gflow.dev/v1alpha1", "kind": "Job", "metadata": meta, "spec": spec}


def from_dict(data: dict, source: str = "jobs/a.yaml", mtime_ns: int = 0) -> AdmittedJob | Rejection:
    stem = source.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return validate_document(data, source=source, path="/h/" + source, stem=stem, single=True, mtime_ns=mtime_ns)


FULL = """\
apiVersion: gflow.dev/v1alpha1
kind: Job
metadata:
  name: train-resnet
  labels: {team: vision}
spec:
  command: [python, train.py, --lr, "0.01"]
  workingDir: ~/proj
  env: {WANDB_MODE: offline}
  condaEnv: torch
  resources:
    gpus: 2
    gpuType: H100
    gpuMemory: 20Gi
    memory: 16Gi
  sharing: Exclusive
  priority: 10
  timeLimit: 4h30m
  backoffLimit: 2
  dependsOn:
    - {job: preprocess, condition: Succeeded}
  startAfter: "2026-12-01T22:00:00"
  suspend: false
  cancelled: false
"""


# --- one document ----------------------------------------------------------------------------------


def test_full_manifest_from_the_spec_is_admitted_with_parsed_values():
    job = admitted(FULL, "jobs/train.yaml")
    assert job.name == "train-resnet"
    assert job.source == "jobs/train.yaml"
    spec = job.spec
    assert spec.command == ["python", "train.py", "--lr", "0.01"]
    assert spec.resources.gpus == 2
    assert spec.resources.gpu_type == "H100"
    assert spec.resources.gpu_memory == 20 * GIB
    assert spec.resources.memory == 16 * GIB
    assert spec.time_limit == 4.5 * 3600
    assert spec.backoff_limit == 2
    assert [(d.job, d.condition) for d in spec.depends_on] == [("preprocess", "Succeeded")]
    assert job.job.metadata.labels == {"team": "vision"}
    assert len(job.spec_hash) == 16 and len(job.run_hash) == 16


def test_minimal_manifest_gets_defaults():
    job = admitted("spec:\n  script: |\n    echo hi\n")
    spec = job.spec
    assert spec.script == "echo hi\n"
    assert (spec.resources.gpus, spec.sharing, spec.priority, spec.backoff_limit) == (0, "Exclusive", 0, 0)
    assert (spec.suspend, spec.cancelled, spec.time_limit, spec.depends_on) == (False, False, None, [])


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("jobs/train.yaml", "train"),
        ("jobs/team/eval-7.yml", "eval-7"),
        ("jobs/a.b.yaml", None),  # stem "a.b": not a DNS-1123 label
    ],
)
def test_metadata_name_omitted_uses_the_file_stem(source, name):
    result = one("spec:\n  command: [echo]\n", source)
    if name is None:
        assert isinstance(result, Rejection)
        assert result.name is None
    else:
        assert isinstance(result, AdmittedJob), result
        assert result.name == name
        assert result.job.metadata.name == name


@pytest.mark.parametrize("stem", ["Train", "train_resnet", "-train", "train-", "x" * 64])
def test_invalid_file_stem_without_metadata_name_is_rejected_without_a_name(stem):
    result = rejected("spec:\n  command: [echo]\n", f"jobs/{stem}.yaml")
    assert result.name is None  # no valid name: only a Warning event names the file
    assert result.reason == "Invalid"
    assert result.message == (
        f"metadata.name: required, the file name {stem!r} is not a valid job name (jobs/{stem}.yaml line 1)"
    )


def test_metadata_name_wins_over_a_bad_stem():
    assert admitted("metadata: {name: good}\nspec:\n  command: [echo]\n", "jobs/Bad_File.yaml").name == "good"


def test_invalid_metadata_name_is_reported_under_the_file_stem():
    result = rejected("metadata: {name: Bad_Name}\nspec:\n  command: [echo]\n", "jobs/fallback.yaml")
    assert result.name == "fallback"
    assert result.message.startswith("metadata.name: 'Bad_Name' is not a valid name")
    assert result.message.endswith("(jobs/fallback.yaml line 1)")


def test_several_documents_need_their_own_names():
    text = "spec:\n  command: [a]\n---\nmetadata: {name: b}\nspec:\n  command: [b]\n"
    first, second = check_text(text, "jobs/multi.yaml")
    assert isinstance(first, Rejection)
    assert first.name is None
    assert first.message == "metadata.name: required when a file holds several documents (jobs/multi.yaml line 1)"
    assert isinstance(second, AdmittedJob) and second.name == "b" and second.doc_index == 1


NEGATIVE_GPUS = [
    pytest.param(FULL.replace("gpus: 2", "gpus: -1"), "jobs/a.yaml", 12, id="full-manifest"),
    pytest.param(
        "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: a\nspec:\n  command: [echo, hi]\n"
        "  resources:\n    gpuType: H100\n    gpus: -1\n",
        "jobs/a.yaml",
        9,
        id="spec-example-line-9",
    ),
    pytest.param("# a comment\n\nspec:\n  command: [x]\n  resources: {gpus: -3}\n", "jobs/a.yaml", 5, id="flow"),
    pytest.param(
        "metadata: {name: a}\nspec:\n  command: [x]\n---\nmetadata: {name: b}\nspec:\n  command: [x]\n"
        "  resources:\n    gpus: -1\n",
        "jobs/two.yaml",
        9,
        id="second-document-counts-lines-from-file-start",
    ),
]


@pytest.mark.parametrize(("text", "source", "line"), NEGATIVE_GPUS)
def test_negative_gpus_message_names_field_and_line(text, source, line):
    result = check_text(text, source)[-1]
    assert isinstance(result, Rejection)
    assert result.reason == "Invalid"
    assert result.message == f"spec.resources.gpus: must be >= 0 ({source} line {line})"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "spec:\n  command: [x]\n  resoures: {gpus: 1}\n",
            "spec.resoures: unknown field; did you mean resources? (jobs/a.yaml line 3)",
        ),
        (
            "spec:\n  comand: [x]\n",
            "spec.comand: unknown field; did you mean command? (jobs/a.yaml line 2)",
        ),
        (
            "spec:\n  command: [x]\n  resources:\n    gpu: 1\n",
            "spec.resources.gpu: unknown field; did you mean gpus? (jobs/a.yaml line 4)",
        ),
        (
            "metadata:\n  lables: {}\nspec:\n  command: [x]\n",
            "metadata.lables: unknown field; did you mean labels? (jobs/a.yaml line 2)",
        ),
        (
            "spec:\n  command: [x]\n  dependsOn:\n    - job: p\n      conditon: Failed\n",
            "spec.dependsOn[0].conditon: unknown field; did you mean condition? (jobs/a.yaml line 5)",
        ),
        (
            "spec:\n  command: [x]\n  backofflimit: 3\n",
            "spec.backofflimit: unknown field; did you mean backoffLimit? (jobs/a.yaml line 3)",
        ),
        ("spec:\n  command: [x]\n  zzz: 1\n", "spec.zzz: unknown field (jobs/a.yaml line 3)"),
    ],
)
def test_unknown_field_is_rejected_with_did_you_mean(text, message):
    result = rejected(text)
    assert result.reason == "Invalid"
    assert result.message == message


@pytest.mark.parametrize(
    ("field_yaml", "path", "explanation"),
    [
        ("resources: {gpus: '2'}", "spec.resources.gpus", "must be an integer"),
        ("priority: 1.5", "spec.priority", "must be an integer"),
        ("suspend: 'yes'", "spec.suspend", "must be true or false"),
        ("env: [a]", "spec.env", "must be a mapping"),
        ("sharing: shared", "spec.sharing", "must be one of Exclusive or Shared"),
        ("workingDir: 5", "spec.workingDir", "must be a string (quote numbers and booleans)"),
        ("resources: {gpuMemory: 16 gigs}", "spec.resources.gpuMemory", "'16 gigs' is not a quantity"),
        ("timeLimit: 4 hours", "spec.timeLimit", "'4 hours' is not a duration"),
        ("backoffLimit: -1", "spec.backoffLimit", "must be >= 0"),
        ("env: {'1BAD': x}", "spec.env", "'1BAD' is not a valid environment variable name"),
        ("startAfter: tomorrow", "spec.startAfter", "'tomorrow' is not a time"),
    ],
)
def test_wrong_types_and_values_name_the_field_and_line(field_yaml, path, explanation):
    result = rejected(f"spec:\n  command: [x]\n  {field_yaml}\n")
    assert result.message.startswith(f"{path}: {explanation}")
    assert result.message.endswith("(jobs/a.yaml line 3)")


def test_command_given_as_a_string_must_be_a_list():
    assert rejected("spec:\n  command: echo hi\n").message == "spec.command: must be a list (jobs/a.yaml line 2)"


def test_command_float_argument_must_be_quoted():
    message = rejected("spec:\n  command: [x, 1.10]\n").message
    assert message.startswith("spec.command[1]: 1.1 is a number: quote it")


def test_command_integers_and_booleans_become_text():
    assert admitted("spec:\n  command: [sleep, 30, true]\n").spec.command == ["sleep", "30", "true"]


@pytest.mark.parametrize(
    "spec_yaml",
    ["command: [x]\n  script: echo", "priority: 1", "command: null\n  script: null"],
    ids=["both", "none", "both-null"],
)
def test_exactly_one_of_command_and_script(spec_yaml):
    result = rejected(f"spec:\n  {spec_yaml}\n")
    assert result.message == "spec: exactly one of command and script is required (jobs/a.yaml line 1)"


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ("{gpus: 1}", "spec: sharing Shared needs resources.gpuMemory (the GPU memory it may use per GPU)"),
        ("{gpuMemory: 10Gi}", "spec: sharing Shared needs resources.gpus >= 1"),
    ],
)
def test_shared_needs_gpus_and_gpu_memory(resources, message):
    result = rejected(f"spec:\n  command: [x]\n  sharing: Shared\n  resources: {resources}\n")
    assert result.message == f"{message} (jobs/a.yaml line 1)"


def test_shared_with_gpu_memory_is_admitted():
    job = admitted("spec:\n  command: [x]\n  sharing: Shared\n  resources: {gpus: 1, gpuMemory: 10Gi}\n")
    assert job.spec.resources.gpu_memory == 10 * GIB


def test_depends_on_bare_string_means_succeeded():
    job = admitted("spec:\n  command: [x]\n  dependsOn: [pre, {job: b, condition: Failed}, {job: c}]\n")
    assert [(d.job, d.condition) for d in job.spec.depends_on] == [
        ("pre", "Succeeded"),
        ("b", "Failed"),
        ("c", "Succeeded"),
    ]


def test_depends_on_bad_condition():
    result = rejected("spec:\n  command: [x]\n  dependsOn:\n    - job: p\n      condition: Done\n")
    assert result.message == (
        "spec.dependsOn[0].condition: must be one of Succeeded, Failed or Finished (jobs/a.yaml line 5)"
    )


@pytest.mark.parametrize("value", ["'+2h'", "'2026-12-01T22:00:00'", "'2026-12-01T22:00:00Z'"])
def test_start_after_accepts_times_and_delays(value):
    assert admitted(f"spec:\n  command: [x]\n  startAfter: {value}\n").spec.start_after == value.strip("'")


def test_start_after_unquoted_timestamp_is_accepted():
    """YAML reads an unquoted ``2026-12-01T22:00:00`` as a timestamp, not a string. Users write it
    unquoted (it is a time, nothing suggests quoting it); admission should accept it rather than say
    "must be a string (quote numbers and booleans)"."""
    result = one("spec:\n  command: [x]\n  startAfter: 2026-12-01T22:00:00\n")
    assert isinstance(result, AdmittedJob), result.message


@pytest.mark.parametrize("value", [".nan", ".inf"])
def test_time_limit_must_be_finite(value):
    """``timeLimit: .nan`` would never be enforced (every comparison with NaN is false)."""
    result = one(f"spec:\n  command: [x]\n  timeLimit: {value}\n")
    assert isinstance(result, Rejection), f"timeLimit {value} admitted as {result.spec.time_limit!r}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "kind: Deployment\nspec: {}\n",
            "kind: 'Deployment' is not supported; use Job, Sweep or Reservation (jobs/a.yaml line 1)",
        ),
        ("- a\n- b\n", "document is a list, not a Job mapping (jobs/a.yaml)"),
        ("just text\n", "document is a str, not a Job mapping (jobs/a.yaml)"),
        ("metadata: {name: a}\n", "spec: required field is missing (jobs/a.yaml line 1)"),
        (
            "apiVersion: gflow.dev/v1\nspec:\n  command: [x]\n",
            "apiVersion: must be one of gflow.dev/v1alpha1 (jobs/a.yaml line 1)",
        ),
        ("spec:\n  command: []\n", "spec.command: must not be empty (jobs/a.yaml line 2)"),
    ],
)
def test_documents_that_are_not_jobs(text, message):
    result = rejected(text)
    assert (result.name, result.reason, result.message) == ("a", "Invalid", message)


def test_every_error_is_shown_at_once():
    result = rejected("spec:\n  command: [x]\n  resources: {gpus: -1, memory: lots}\n  priority: x\n  gpu: 1\n")
    assert result.message == (
        "4 errors: spec.resources.gpus: must be >= 0 (jobs/a.yaml line 3); "
        "spec.resources.memory: 'lots' is not a quantity; use a number with a unit like 16Gi, 500M or 512Mi (jobs/a.yaml line 3); "
        "spec.priority: must be an integer (jobs/a.yaml line 4); "
        "spec.gpu: unknown field (jobs/a.yaml line 5)"
    )


def test_rejection_without_text_has_no_line():
    result = from_dict(job_doc(resources={"gpus": -1}))
    assert isinstance(result, Rejection)
    assert result.message == "spec.resources.gpus: must be >= 0 (jobs/a.yaml)"


# --- hashes ----------------------------------------------------------------------------------------

BASE = "metadata:\n  name: a\nspec:\n  command: [python, train.py, '1']\n  priority: 1\n  resources: {gpus: 1}\n"

SAME_SPEC = [
    pytest.param(
        "# reformatted, reordered, commented\nspec:\n  resources:\n    gpus: 1   # one\n  priority: 1\n"
        '  command:\n    - python\n    - "train.py"\n    - 1\nmetadata: {name: a}\n',
        id="formatting-order-comments",
    ),
    pytest.param(BASE.replace("  name: a\n", "  name: a\n  labels: {team: vision}\n"), id="labels"),
    pytest.param(BASE.replace("  name: a\n", "  name: a\n  annotations: {note: hi}\n"), id="other-annotation"),
    pytest.param(BASE + "  env: {}\n  sharing: Exclusive\n  backoffLimit: 0\n", id="explicit-defaults"),
    pytest.param(BASE.replace("metadata:\n  name: a\n", ""), id="name-from-stem"),
]


@pytest.mark.parametrize("text", SAME_SPEC)
def test_spec_hash_ignores_formatting_and_labels(text):
    base = admitted(BASE)
    other = admitted(text)
    assert (other.spec_hash, other.run_hash) == (base.spec_hash, base.run_hash)


CHANGED_RUN = [
    pytest.param(BASE.replace("train.py", "eval.py"), id="command"),
    pytest.param(BASE.replace("{gpus: 1}", "{gpus: 2}"), id="gpus"),
    pytest.param(BASE + "  env: {A: b}\n", id="env"),
    pytest.param(BASE + "  backoffLimit: 3\n", id="backoffLimit"),
    pytest.param(BASE.replace("  name: a\n", "  name: a\n  annotations: {gflow.dev/rerun: '1'}\n"), id="rerun"),
]


@pytest.mark.parametrize("text", CHANGED_RUN)
def test_spec_and_run_hash_change_with_what_a_run_depends_on(text):
    base = admitted(BASE)
    other = admitted(text)
    assert other.spec_hash != base.spec_hash
    assert other.run_hash != base.run_hash


CONTROL_ONLY = [
    pytest.param(BASE.replace("priority: 1", "priority: 50"), id="priority"),
    pytest.param(BASE + "  suspend: true\n", id="suspend"),
    pytest.param(BASE + "  cancelled: true\n", id="cancelled"),
    pytest.param(BASE + "  timeLimit: 1h\n", id="timeLimit"),  # SPEC 3: acts on the running attempt
    pytest.param(BASE + "  terminationGracePeriod: 30s\n", id="grace"),
    pytest.param(BASE + "  ttlSecondsAfterFinished: 1d\n", id="ttl"),
    pytest.param(BASE.replace("priority: 1", "priority: -3") + "  suspend: true\n  cancelled: true\n", id="all"),
]


@pytest.mark.parametrize("text", CONTROL_ONLY)
def test_run_hash_ignores_the_fields_that_steer_a_job(text):
    base = admitted(BASE)
    other = admitted(text)
    assert other.run_hash == base.run_hash
    assert other.spec_hash != base.spec_hash  # still a spec change: the generation bumps


def test_spec_hashes_is_deterministic_across_equal_jobs():
    a = admitted(BASE).job
    b = admitted(BASE).job
    assert spec_hashes(a) == spec_hashes(b)


# --- admit: across documents -----------------------------------------------------------------------


def named(name: str, source: str, mtime_ns: int, command: str = "true") -> AdmittedJob:
    result = from_dict(job_doc(name, command=[command]), source, mtime_ns)
    assert isinstance(result, AdmittedJob), result
    return result


def test_admit_keeps_distinct_names():
    result = admit([named("a", "jobs/a.yaml", 1), named("b", "jobs/b.yaml", 2)])
    assert sorted(result.jobs) == ["a", "b"]
    assert result.rejected == {} and result.warnings == [] and result.duplicates == {}


def test_duplicate_name_oldest_file_wins_without_an_owner():
    old = named("a", "jobs/old.yaml", mtime_ns=100, command="old")
    new = named("a", "jobs/new.yaml", mtime_ns=200, command="new")
    for order in ([old, new], [new, old]):
        result = admit(order)
        assert result.jobs["a"].source == "jobs/old.yaml"
        assert result.duplicates == {"a": ["jobs/new.yaml"]}


def test_duplicate_name_current_owner_is_kept_and_loser_reported_naming_both_files():
    owner = named("a", "jobs/a.yaml", mtime_ns=500, command="mine")
    intruder = named("a", "jobs/b.yaml", mtime_ns=1, command="theirs")  # older, yet not the owner
    result = admit([intruder, owner], current_sources={"a": "jobs/a.yaml"})
    assert result.jobs["a"].source == "jobs/a.yaml"
    assert result.jobs["a"].spec.command == ["mine"]
    assert result.duplicates == {"a": ["jobs/b.yaml"]}
    # the loser gets a Rejected status under its own file stem, and a Warning event
    loser = result.rejected["b"]
    assert loser.reason == "DuplicateName"
    assert "jobs/a.yaml" in loser.message and "jobs/b.yaml" in loser.message
    assert loser.message == "job name 'a' is already defined in jobs/a.yaml; rename it in jobs/b.yaml (metadata.name)"
    assert [(w.name, w.reason, w.source) for w in result.warnings] == [("a", "DuplicateName", "jobs/b.yaml")]


def test_duplicate_loser_stem_that_names_another_job_is_not_overwritten():
    a = named("a", "jobs/a.yaml", 1)
    b = named("b", "jobs/b.yaml", 2)
    dup = named("a", "jobs/b.yaml", 3)  # a second document in b.yaml claiming "a"
    result = admit([a, b, dup])
    assert result.jobs["b"] is b
    assert "b" not in result.rejected
    assert result.duplicates == {"a": ["jobs/b.yaml"]}


def test_duplicate_of_a_rejected_document_still_keeps_the_first():
    bad = from_dict(job_doc("a", resources={"gpus": -1}), "jobs/a.yaml", 1)
    good = named("a", "jobs/z.yaml", 2)
    result = admit([good, bad])
    assert isinstance(bad, Rejection)
    assert result.rejected["a"] is bad  # the first manifest owns the name, even while invalid
    assert "a" not in result.jobs


def test_documents_without_a_name_become_warnings():
    nameless = one("spec:\n  command: [x]\n", "jobs/Not_A_Name.yaml")
    result = admit([nameless])
    assert result.jobs == {} and result.rejected == {}
    assert result.warnings == [nameless]


# --- who may run what, and what this machine can do -------------------------------------------------


def _owned(uid: int, text: str = "spec:\n  command: [x]\n") -> AdmittedJob:
    from controller.util.yamlio import load_one as _load

    result = validate_document(
        _load(text), source="jobs/o.yaml", path="/x/o.yaml", stem="o", single=True, owner_uid=uid
    )
    assert isinstance(result, AdmittedJob)
    return result


def test_non_root_controller_rejects_manifests_owned_by_someone_else():
    result = admit([_owned(1001)], controller_uid=1000)
    assert "o" not in result.jobs
    assert result.rejected["o"].reason == "Forbidden"
    assert "uid 1001" in result.rejected["o"].message and "uid 1000" in result.rejected["o"].message


def test_root_controller_and_own_manifests_are_admitted():
    assert "o" in admit([_owned(1001)], controller_uid=0).jobs
    assert "o" in admit([_owned(1000)], controller_uid=1000).jobs


def test_conda_env_without_conda_is_rejected_with_a_clear_message():
    job = _owned(0, "spec:\n  command: [python, t.py]\n  condaEnv: torch\n")
    result = admit([job], conda_available=False)
    assert result.rejected["o"].reason == "Invalid"
    assert result.rejected["o"].message.startswith("spec.condaEnv: conda is not installed")
    assert "o" in admit([job], conda_available=True).jobs
