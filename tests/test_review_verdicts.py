"""gflowd keeps the verdict its review just gave on a manifest (``observe/review_verdicts.py``) and
takes it, instead of parsing and validating again, when a file of exactly those bytes, that owner
and that path lands: the result is the store's own, and anything else is parsed as always."""

from __future__ import annotations

import os

import pytest
from helpers import wait_for, wait_phase
from test_cli_e2e import ctl

from controller.daemon.review import expect_landing, judge_as
from controller.observe.manifests import ManifestStore
from controller.observe.review_verdicts import ReviewVerdicts
from controller.util.fsutil import create_new

PLAIN = (
    "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: {name}  # mine\nspec:\n  command: [sleep, '300']\n"
)


def _reviewed(spec, verdicts: ReviewVerdicts, uid: int, texts: dict[str, str], folder: str | None) -> dict:
    """gflowd's review of ``texts`` (origin -> text), its verdicts worked out as after its answer."""
    inputs = [
        {"origin": origin, "text": text, **({"folder": folder} if folder else {})} for origin, text in texts.items()
    ]
    answer = judge_as(uid, {"inputs": inputs}, controller_uid=0, conda_available=True, never_fits=None)
    then = expect_landing(verdicts, os.path.abspath(spec), uid, {"inputs": inputs}, answer)
    assert then is not None
    then()
    return answer


def _store(spec, verdicts: ReviewVerdicts | None = None) -> ManifestStore:
    store = ManifestStore(spec, lambda path: os.path.relpath(path, spec.parent))
    store.verdicts = verdicts
    return store


def test_a_file_landing_as_reviewed_is_taken_from_the_verdict_as_a_parse_would_make_it(tmp_path):
    spec, proj = tmp_path / "jobs", tmp_path / "proj"
    spec.mkdir()
    proj.mkdir()
    verdicts = ReviewVerdicts()
    two = PLAIN.format(name="two-a") + "---\n" + PLAIN.format(name="two-b")
    answer = _reviewed(
        spec, verdicts, os.getuid(), {f"{proj}/a.yaml": PLAIN.format(name="a"), f"{proj}/two.yaml": two}, str(proj)
    )
    stored = [doc["text"] for judged in answer["inputs"] for doc in judged["docs"]]  # placed: workingDir added
    assert len(stored) == 3 and all(f'workingDir: "{proj}"' in text for text in stored)
    for doc, text in zip([d for j in answer["inputs"] for d in j["docs"]], stored):
        create_new(spec / f"{doc['name']}.yaml", text if text.endswith("\n") else text + "\n")

    taken = _store(spec, verdicts)
    taken.scan()
    parsed = _store(spec)  # no verdicts: parses and validates every file
    parsed.scan()
    assert verdicts.hits == 3
    assert sorted(taken.documents(), key=lambda d: d.name) == sorted(parsed.documents(), key=lambda d: d.name)
    for path, manifest in parsed.files.items():
        assert taken.files[path].parsed_json == manifest.parsed_json  # the parse cache's entry too
        assert taken.files[path].key == manifest.key
    assert [d.job for d in taken.documents()] == [parsed.files[d.path].documents[0].job for d in taken.documents()]


@pytest.mark.parametrize("change", ["other bytes", "another owner", "another path", "expired"])
def test_a_file_not_as_reviewed_is_parsed(tmp_path, change):
    spec = tmp_path / "jobs"
    spec.mkdir()
    now = [0.0]
    verdicts = ReviewVerdicts(clock=lambda: now[0])
    text = PLAIN.format(name="a")
    _reviewed(spec, verdicts, os.getuid() + (1 if change == "another owner" else 0), {"<stdin>": text}, None)
    body = text.replace("300", "301") if change == "other bytes" else text
    create_new(spec / ("b.yaml" if change == "another path" else "a.yaml"), body)
    if change == "expired":
        now[0] += 60
    store = _store(spec, verdicts)
    store.scan()
    assert verdicts.hits == 0
    assert store.parses == 1 and [d.job.spec.command for d in store.documents()] == [
        ["sleep", "301" if change == "other bytes" else "300"]
    ]


def test_a_job_the_review_refuses_keeps_no_verdict(tmp_path):
    spec = tmp_path / "jobs"
    spec.mkdir()
    verdicts = ReviewVerdicts()
    inputs = [{"origin": "<stdin>", "text": PLAIN.format(name="a").replace("command", "comand")}]
    answer = judge_as(os.getuid(), {"inputs": inputs}, controller_uid=0, conda_available=True, never_fits=None)
    assert answer["inputs"][0]["errors"] and expect_landing(verdicts, str(spec), 0, {"inputs": inputs}, answer) is None


def test_the_store_waits_for_a_verdict_still_worked_out_and_the_oldest_go_past_the_limit():
    verdicts = ReviewVerdicts(limit=2)
    gives = [verdicts.expect(("p", 0, str(i).encode())) for i in range(3)]
    assert verdicts.take(("p", 0, b"0")) is None  # evicted: not waited for
    import threading

    from controller.observe.review_verdicts import Verdict

    kept = Verdict(None, [])
    threading.Timer(0.05, gives[1], args=(kept,)).start()
    assert verdicts.take(("p", 0, b"1")) is kept  # waited for the review thread
    assert verdicts.take(("p", 0, b"1")) is None  # taken once


@pytest.mark.e2e
def test_run_and_apply_land_as_gflowd_reviewed_them(home, gflowd, tmp_path):
    """Through the CLI and a real gflowd: what run and apply (from a project folder) store is
    admitted from the review's verdict, not parsed again, and runs."""
    daemon = gflowd("--log-level", "debug")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "applied.yaml").write_text(PLAIN.format(name="applied"))
    assert ctl(home, "apply", "-f", str(proj / "applied.yaml")).returncode == 0
    assert ctl(home, "run", "--name", "ran", "--", "sleep", "300").returncode == 0
    for name in ("applied", "ran"):
        wait_phase(home, name, "Running", daemon=daemon)
        wait_for(lambda name=name: f"jobs/{name}.yaml: as the review judged it" in daemon.stderr(), timeout=30)
