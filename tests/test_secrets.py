"""Nothing gflowd or gflowctl writes lets one user read what another user's own files keep from
them (issue 32, hole 2, and the smaller items of hole 10: another user's log in ``gflowctl logs``
and the MCP server, ``functions/`` of another user).

Each attack runs as an ordinary uid (mallory, 65533) against files and a root gflowd of alice
(65534, "nobody"): forked children that dropped to those uids (helpers.run_as), real files, a real
gflowd. docs/multi-user.md, "What other users can read", lists each surface and its test here.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import tempfile
import urllib.parse
from pathlib import Path

import pytest
from helpers import run_as, wait_for, wait_phase

from controller.cli.main import main

ALICE, MALLORY = 65534, 65533
SECRET = "tok-5e9c1b7d-alice-only"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the test acts as two other users")


@pytest.fixture
def shared_home():
    """A home anyone can traverse, with a sticky, world-writable spec dir (docs/multi-user.md)."""
    root = Path(tempfile.mkdtemp(prefix="gflow-secrets-"))
    os.chmod(root, 0o755)
    (root / "jobs").mkdir()
    os.chmod(root / "jobs", 0o1777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def alices_private_manifest(home: Path) -> Path:
    manifest = home / "jobs" / "alice-env.yaml"
    manifest.write_text(f"metadata: {{name: alice-env}}\nspec:\n  command: ['true']\n  env: {{TOKEN: {SECRET}}}\n")
    os.chown(manifest, ALICE, ALICE)
    os.chmod(manifest, 0o600)  # alice keeps it from everybody
    return manifest


def readable_by(uid: int, home: Path) -> dict[str, str]:
    """Every file under ``home`` that ``uid`` can read, with its text (read as that uid)."""

    def work() -> int:
        import sys

        found = {}
        for folder, _, files in os.walk(home):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    with open(path, "rb") as handle:
                        found[path] = handle.read().decode("utf-8", errors="replace")
                except OSError:
                    continue
        sys.stderr.write(json.dumps(found))
        return 0

    code, out = run_as(uid, work)
    assert code == 0, out
    return json.loads(out)


# -- hole 2: the manifest cache and every other file gflowd writes --------------------------------------


def test_no_file_gflowd_writes_shows_mallory_alices_env(shared_home, gflowd):
    alices_private_manifest(shared_home)
    daemon = gflowd(home=shared_home)
    wait_phase(shared_home, "alice-env", "Succeeded", timeout=30, daemon=daemon)
    cache = shared_home / "run" / "manifest-cache.json"
    wait_for(
        lambda: cache.exists() and SECRET.encode() in cache.read_bytes(), message="gflowd to write its parse cache"
    )
    daemon.wait_pass()
    leaks = {path: text for path, text in readable_by(MALLORY, shared_home).items() if SECRET in text}
    assert leaks == {}, f"mallory reads alice's env in {sorted(leaks)}"
    st = cache.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600)


def test_an_older_gflowds_open_cache_is_closed_and_a_planted_one_dropped(shared_home, gflowd):
    run = shared_home / "run"
    run.mkdir(mode=0o755)
    cache = run / "manifest-cache.json"
    cache.write_text('{"version": 0}\n')
    os.chmod(cache, 0o644)  # what an older gflowd wrote
    script = run / "attempts" / "alice-env.1.sh"
    script.parent.mkdir()
    script.write_text(f"echo {SECRET}\n")
    os.chown(script, ALICE, ALICE)
    os.chmod(script, 0o755)
    trace = run / "attempts" / "alice-env.1.log"  # a supervisor's trace: it may quote the job's command
    trace.write_text(f"exec [{SECRET}] failed\n")
    os.chmod(trace, 0o644)
    daemon = gflowd(home=shared_home)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600, daemon.stderr()
    assert stat.S_IMODE(trace.stat().st_mode) == 0o600
    st = script.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (ALICE, 0o700)
    assert stat.S_IMODE((shared_home / "functions").stat().st_mode) == 0o1777  # where users' functions/<uid>/ go
    daemon.terminate()

    cache.unlink()
    cache.write_text('{"version": 0}\n')  # a cache mallory planted: never believed, removed
    os.chown(cache, MALLORY, MALLORY)
    daemon = gflowd(home=shared_home)
    wait_for(lambda: not cache.exists() or cache.stat().st_uid == 0, message="gflowd to drop mallory's cache")


# -- run and apply write manifests with the user's umask, 0600 when they carry env ---------------------------


def submit_as(uid: int, umask: int, argv: list[str]) -> tuple[int, str]:
    def work() -> int:
        os.umask(umask)
        return main(argv)

    return run_as(uid, work)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("umask", "argv", "mode"),
    [
        (0o077, ["run", "--name", "r1", "-e", f"TOKEN={SECRET}", "--", "true"], 0o600),  # the case
        (0o022, ["run", "--name", "r2", "-e", f"TOKEN={SECRET}", "--", "true"], 0o600),  # env: 0600 whatever the umask
        (0o077, ["run", "--name", "r3", "--", "true"], 0o600),  # the user's umask
        (0o027, ["run", "--name", "r4", "--", "true"], 0o640),
        (0o022, ["run", "--name", "r5", "--", "true"], 0o644),
    ],
)
def test_run_writes_the_manifest_with_the_users_umask_and_0600_with_env(shared_home, umask, argv, mode):
    name = argv[2]
    main(["--home", str(shared_home), "run", "--dry-run", "-o", "yaml", "--", "true"])  # load what the child uses
    code, err = submit_as(ALICE, umask, ["--home", str(shared_home), *argv])
    assert code == 0, err
    st = (shared_home / "jobs" / f"{name}.yaml").stat()
    assert (st.st_uid, oct(stat.S_IMODE(st.st_mode))) == (ALICE, oct(mode))
    if mode == 0o600:
        code, err = run_as(MALLORY, lambda: main(["--home", str(shared_home), "get", "jobs", name, "-o", "yaml"]))
        assert SECRET not in err


@pytest.mark.e2e
def test_run_of_a_private_script_is_never_more_open_than_the_script(shared_home):
    (shared_home / "src").mkdir(mode=0o755)
    script = shared_home / "src" / "train.sh"
    script.write_text(f"#!/bin/bash\necho {SECRET}\n")
    os.chown(script, ALICE, ALICE)
    os.chmod(script, 0o700)
    main(["--home", str(shared_home), "run", "--dry-run", "-o", "yaml", "--", "true"])  # load what the child uses
    code, err = submit_as(ALICE, 0o022, ["--home", str(shared_home), "run", "--name", "s1", str(script)])
    assert code == 0, err
    assert stat.S_IMODE((shared_home / "jobs" / "s1.yaml").stat().st_mode) == 0o600


@pytest.mark.e2e
def test_apply_is_never_more_open_than_the_file_applied(shared_home):
    (shared_home / "src").mkdir(mode=0o755)
    source = shared_home / "src" / "private.yaml"
    source.write_text("metadata: {name: a1}\nspec:\n  command: ['true']\n")
    os.chown(source, ALICE, ALICE)
    os.chmod(source, 0o600)
    main(["--home", str(shared_home), "apply", "--dry-run", "-f", str(source)])
    code, err = submit_as(ALICE, 0o022, ["--home", str(shared_home), "apply", "-f", str(source)])
    assert code == 0, err
    assert stat.S_IMODE((shared_home / "jobs" / "a1.yaml").stat().st_mode) == 0o600


# -- hole 10: another user's log in gflowctl logs and the MCP server -----------------------------------------


def alices_log(home: Path) -> Path:
    (home / "logs").mkdir(exist_ok=True)
    log = home / "logs" / "alice-train.log"
    log.write_text(f"{SECRET}\n")
    os.chown(log, ALICE, ALICE)
    os.chmod(log, 0o640)
    return log


@pytest.mark.e2e
def test_logs_of_another_users_job_is_one_line_naming_the_owner(shared_home):
    log = alices_log(shared_home)
    main(["--home", str(shared_home), "logs", "alice-train"])  # load what the child uses
    code, err = run_as(MALLORY, lambda: main(["--home", str(shared_home), "logs", "alice-train"]))
    assert code == 1
    assert err.splitlines() == [
        "error: job/alice-train: its log is nobody's and only nobody and root may read it; "
        "run gflowctl logs alice-train as nobody"
    ], err
    assert SECRET not in err and str(log) not in err


@pytest.mark.e2e
def test_mcp_get_logs_of_another_users_job_is_one_line(shared_home):
    pytest.importorskip("mcp")
    from controller.cli.mcp import build_server

    alices_log(shared_home)
    server = build_server(_home(shared_home))
    asyncio.run(server.call_tool("get_gpus", {}))  # load the SDK's lazy parts before the child drops to mallory

    def work() -> int:
        import sys

        try:
            asyncio.run(server.call_tool("get_logs", {"name": "alice-train"}))
        except Exception as exc:
            sys.stderr.write(str(exc))
            return 0
        sys.stderr.write("no error")
        return 1

    code, err = run_as(MALLORY, work)
    assert code == 0, err
    assert len(err.splitlines()) == 1 and "only nobody and root may read it" in err, err
    assert SECRET not in err and "Errno" not in err and "Traceback" not in err


def _home(root: Path):
    from controller.paths import Home

    return Home.locate(root, None)


# -- hole 10: functions/ of another user ---------------------------------------------------------------------


@pytest.mark.e2e
def test_submit_function_works_beside_a_hostile_user_and_refuses_a_squatted_folder(shared_home):
    pytest.importorskip("cloudpickle")
    from controller.client import Client

    functions = shared_home / "functions"
    functions.mkdir()
    os.chmod(functions, 0o1777)  # as a root gflowd makes it at start beside this 1777 spec dir (the admin did before)
    Client(shared_home).submit_function(len, [1], job_options={"name": "warm-up"})  # load what the child uses

    def mallory_squats() -> int:
        os.mkdir(functions / "train", 0o777)  # alice's next job name (the old layout), and watch it
        os.mkdir(functions / "fit")
        return 0

    assert run_as(MALLORY, mallory_squats)[0] == 0

    def alice_submits() -> int:
        # check=False: no gflowd runs this job, and the test's Python may live where uid 65534 cannot
        # run it (root's own pyenv), which the submit check would rightly refuse
        Client(shared_home).submit_function(len, [1, 2], job_options={"name": "train", "check": False})
        return 0

    code, err = run_as(ALICE, alice_submits)
    assert code == 0, err
    folder = functions / str(ALICE) / "train"
    for path, mode in ((folder.parent, 0o700), (folder, 0o700)):
        st = path.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (ALICE, mode), path

    os.mkdir(functions / str(MALLORY))  # a functions/<uid> someone else made: refused, never written into
    os.chown(functions / str(MALLORY), ALICE, ALICE)

    def mallory_submits() -> int:
        from controller.client.errors import GflowError

        try:
            Client(shared_home).submit_function(len, [1], job_options={"name": "fit2"})
        except GflowError as exc:
            import sys

            sys.stderr.write(str(exc))
            return 0
        return 1

    code, err = run_as(MALLORY, mallory_submits)
    assert code == 0, err
    assert len(err.splitlines()) == 1 and f"belongs to uid {ALICE}, not you" in err, err
    assert os.listdir(functions / str(MALLORY)) == []


# -- messages everyone can read never quote an env value ----------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        "{TOKEN: 31415.926535}",
        f"{{TOKEN: [{SECRET}]}}",
        f"{{TOKEN: {{k: {SECRET}}}}}",
        f"[{SECRET}]",
        f"{{'bad name': {SECRET}}}",
        f"{{TOKEN: {SECRET}, TOKEN: {SECRET}}}",
    ],
)
def test_a_bad_env_is_rejected_without_quoting_its_value(tmp_path, capsys, env):
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(f"metadata: {{name: bad}}\nspec:\n  command: ['true']\n  env: {env}\n")
    assert main(["--home", str(tmp_path / "home"), "apply", "--dry-run", "-f", str(manifest)]) == 1
    err = capsys.readouterr().err
    assert "spec.env" in err or "env" in err, err  # it names what to fix
    assert SECRET not in err and "926535" not in err, err


def test_a_parse_cache_another_uid_owns_is_never_believed(tmp_path):
    """A planted cache would tell gflowd what a manifest holds without its being read."""
    from controller.observe.manifests import ManifestStore

    spec = tmp_path / "jobs"
    spec.mkdir()
    (spec / "a.yaml").write_text("metadata: {name: a}\nspec:\n  command: ['true']\n")
    cache = tmp_path / "manifest-cache.json"
    store = ManifestStore(spec, str, cache)
    store.scan()
    store.save_cache(force=True)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert ManifestStore(spec, str, cache)._warm  # gflowd's own: used
    os.chown(cache, MALLORY, MALLORY)
    assert ManifestStore(spec, str, cache)._warm == {}  # another uid's: ignored
    os.chown(cache, 0, 0)
    os.chmod(cache, 0o666)
    assert ManifestStore(spec, str, cache)._warm == {}  # anyone could have written it: ignored


def test_metrics_and_the_dashboards_shared_view_show_mallory_no_env(shared_home, gflowd):
    """The served surfaces everyone may read (Prometheus metrics, the dashboard's shared view and
    its events) carry names, phases and reasons, never a manifest's env: mallory scrapes both."""
    from test_metrics import metrics_url
    from test_web_access import dashboard_address, get_as

    alices_private_manifest(shared_home)
    daemon = gflowd("--metrics-port", "0", "--web-port", "0", home=shared_home)
    wait_phase(shared_home, "alice-env", "Succeeded", timeout=30, daemon=daemon)
    metrics = urllib.parse.urlsplit(metrics_url(daemon))
    answers = {
        "/metrics": get_as(MALLORY, (metrics.hostname, metrics.port), metrics.path),
        "/api/state": get_as(MALLORY, dashboard_address(daemon), "/api/state"),
    }
    for where, (status, body) in answers.items():
        assert status == 200, (where, status, body[:200])
    assert "alice-env" in answers["/api/state"][1] and "gflow_jobs" in answers["/metrics"][1]  # the job is there...
    assert [where for where, (_, body) in answers.items() if SECRET in body] == []  # ...its env is not
