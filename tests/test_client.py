"""``controller.client.Client`` against a real gflowd on fake GPUs: what gflowctl does, from
Python, through the same files and the same functions, with typed results and gflowctl's error
lines; and Python functions as jobs (``submit_function``, ``map``) whose futures return the value
or raise what the function raised, or say which job died without a result and why."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import wait_for

from controller.client import Client, GflowError, Gpu, Job, JobError, NotFound, Submitted


def ctl(home: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "--home", str(home), *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def proj(tmp_path: Path, monkeypatch) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return folder


def test_submit_wait_logs_list_and_gpus_as_typed_objects(home, gflowd, proj, fake_gpus):
    gflowd("--fake-gpus", fake_gpus)
    client = Client(home)
    submitted = client.submit(
        [sys.executable, "-c", "import os; print('in', os.getcwd(), os.environ['CUDA_VISIBLE_DEVICES'])"],
        gpus=1,
        labels={"team": "vision"},
        priority=3,
    )
    assert isinstance(submitted, Submitted) and submitted.kind == "job" and submitted.verb == "created"
    job = client.wait(submitted.name, "Succeeded", timeout=30)
    assert isinstance(job, Job) and job.phase == "Succeeded" and job.exit_code == 0 and job.priority == 3
    assert job.gpus == 1 and len(job.devices) == 1 and job.labels == {"team": "vision"}
    assert any(c["type"] == "Admitted" for c in job.conditions)
    assert client.logs(submitted.name) == f"in {proj} {job.devices[0]}\n"
    # the same job gflowctl sees: an ordinary manifest in the spec dir
    assert ctl(home, "get", "jobs", "-o", "name").stdout.split() == [f"job/{submitted.name}"]

    other = client.submit(
        f"{sys.executable} -c 'print(1)'", labels={"team": "audio"}
    )  # a string: split like a shell line
    client.wait(other.name, timeout=30)
    assert [j.name for j in client.list(labels={"team": "vision"})] == [submitted.name]
    assert [j.name for j in client.list(labels="team!=vision")] == [other.name]
    assert sorted(j.name for j in client.list(phase="Succeeded")) == sorted([submitted.name, other.name])
    assert client.list(phase=["Running", "Pending"]) == []
    gpus = client.gpus()
    assert [g.index for g in gpus] == [0, 1] and all(isinstance(g, Gpu) and g.state == "Free" for g in gpus)
    assert "H100" in gpus[0].name


def test_edits_act_on_a_running_and_a_waiting_job(home, gflowd, proj, fake_gpus):
    gflowd("--fake-gpus", fake_gpus)
    client = Client(home)
    holder = client.submit(["sleep", "60"], name="holder", gpus=2)
    client.wait(holder.name, "Running", timeout=30)
    waiter = client.submit(["true"], name="waiter", gpus=1)
    client.wait("waiter", condition="Admitted", timeout=30)
    wait_for(lambda: client.get("waiter").reason == "Resources", timeout=30)
    why = client.explain_pending("waiter")
    assert why["reason"] == "Resources" and why["gpusFree"] == 0 and why["gpusRequested"] == 1
    assert why["gpusHeldBy"] == ["holder"] and "enough GPUs free up" in why["explanation"]

    assert client.set_priority("waiter", 7) == "job/waiter priority set to 7"
    wait_for(lambda: client.get("waiter").priority == 7, timeout=30)
    assert client.suspend("waiter") == ["job/waiter suspended"]
    wait_for(lambda: client.get("waiter").reason == "Suspended", timeout=30)
    assert client.cancel("holder") == ["job/holder cancelled"]
    assert client.wait("holder", "Cancelled", timeout=30).reason == "UserCancelled"
    assert client.get("waiter").phase == "Pending"  # still held
    with pytest.raises(GflowError, match="job/holder is Cancelled \\(UserCancelled\\); it will not become Succeeded"):
        client.wait("holder", "Succeeded", timeout=30)
    client.resume("waiter")
    assert client.wait(waiter.name, timeout=30).phase == "Succeeded"


def test_user_errors_raise_one_type_with_gflowctls_line(home, gflowd, proj, fake_gpus):
    gflowd("--fake-gpus", fake_gpus)
    client = Client(home)
    for call, argv in [
        (lambda: client.cancel("nope"), ["cancel", "nope"]),
        (lambda: client.submit(["x"], gpus=-1), ["run", "--gpus", "-1", "--", "x"]),
        (lambda: client.submit(["x"], time="soon"), ["run", "--time", "soon", "--", "x"]),
        (lambda: client.set_priority("nope", 1), ["set", "priority", "nope", "1"]),
        (lambda: client.logs("nope"), ["logs", "nope"]),
    ]:
        with pytest.raises(GflowError) as caught:
            call()
        printed = ctl(home, *argv)
        assert printed.returncode == 1 and printed.stderr == f"error: {caught.value}\n", argv
    with pytest.raises(NotFound, match="job/nope not found"):
        client.get("nope")
    # every error of a manifest at once, and nothing written
    bad = "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {name: bad}\nspec:\n  command: [x]\n  resources: {gpus: -1}\n  colour: red\n"
    with pytest.raises(GflowError) as caught:
        client.apply(bad)
    assert "spec.resources.gpus" in str(caught.value) and "colour" in str(caught.value)
    assert "\n" not in str(caught.value) and not (home / "jobs" / "bad.yaml").exists()
    with pytest.raises(GflowError, match=r"timed out after 0.2s waiting for job/nope phase=Succeeded; it is not found"):
        client.wait("nope", timeout=0.2)


def test_apply_takes_text_a_dict_and_a_path(home, gflowd, proj, fake_gpus):
    gflowd("--fake-gpus", fake_gpus)
    client = Client(home)
    manifest = {
        "apiVersion": "gflow.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "from-dict"},
        "spec": {"command": ["true"]},
    }
    assert client.apply(manifest) == [Submitted("job", "from-dict", "created")]
    assert client.apply(manifest) == [Submitted("job", "from-dict", "unchanged")]
    (proj / "a.yaml").write_text(
        "# kept\napiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {name: from-file}\nspec: {command: [pwd]}\n"
    )
    assert client.apply(proj / "a.yaml") == [Submitted("job", "from-file", "created")]
    assert (home / "jobs" / "from-file.yaml").read_text().startswith("# kept\n")  # the user's text
    text = "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {name: from-text}\nspec: {command: [pwd]}\n"
    assert client.apply(text)[0].name == "from-text"
    assert client.wait("from-file", timeout=30).phase == "Succeeded"
    assert client.logs("from-file") == f"{proj}\n"  # runs where it was applied from, as gflowctl apply


def test_a_sweep_with_params_and_a_followed_log(home, gflowd, proj, fake_gpus):
    gflowd("--fake-gpus", fake_gpus)
    client = Client(home)
    sweep = client.sweep(["sh", "-c", "echo lr=$LR"], params={"lr": [0.1, 0.2]}, parallelism=1, name="grid")
    assert sweep == Submitted("sweep", "grid", "created")
    children = wait_for(
        lambda: [j for j in client.list(labels={"gflow.dev/sweep": "grid"}) if j.finished] or None, timeout=30
    )
    wait_for(lambda: len([j for j in client.list(phase="Succeeded") if j.sweep == "grid"]) == 2, timeout=30)
    assert sorted(client.logs(j.name) for j in client.list() if j.sweep == "grid") == ["lr=0.1\n", "lr=0.2\n"]
    assert children[0].sweep == "grid" and client.get("grid").counts == {"Succeeded": 2}

    slow = client.submit(["sh", "-c", "echo first; sleep 1; echo second"], name="slow")
    assert "".join(client.logs(slow.name, follow=True)) == "first\nsecond\n"  # until the job ends
    assert client.get("slow").phase == "Succeeded"


# -- functions as jobs ------------------------------------------------------------------------------


def test_submit_function_returns_the_value_and_reraises_the_remote_exception(home, gflowd, proj, fake_gpus):
    gflowd("--fake-gpus", fake_gpus)
    client = Client(home)
    (proj / "data.txt").write_text("42")
    os.environ["GFLOW_TEST_TOKEN"] = "from-the-submitter"
    try:

        def read_and_scale(factor, *, offset=0):
            return {
                "value": int(Path("data.txt").read_text()) * factor + offset,
                "gpus": os.environ["CUDA_VISIBLE_DEVICES"],
                "token": os.environ.get("GFLOW_TEST_TOKEN"),
                "python": sys.executable,
            }

        future = client.submit_function(read_and_scale, 2, offset=1, gpus=1)
    finally:
        del os.environ["GFLOW_TEST_TOKEN"]
    result = future.result(timeout=60)
    assert result["value"] == 85 and result["token"] == "from-the-submitter" and result["python"] == sys.executable
    job = client.get(future.job)
    assert job.phase == "Succeeded" and result["gpus"] == str(job.devices[0])

    def divide(a, b):
        return a / b

    failing = client.submit_function(divide, 1, 0, gpus=0)
    with pytest.raises(ZeroDivisionError) as caught:
        failing.result(timeout=60)
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert f"remote traceback (job/{failing.job})" in notes and "return a / b" in notes
    assert client.get(failing.job).reason == "Error"


def test_a_remote_traceback_shows_the_submitters_source_lines_through_a_chain():
    """cloudpickle (3.1.3 on) names ``<dynamic-code>`` as the file of code it sends by value; the
    runner puts the submitter's files back, for nested helpers and chained exceptions too."""
    cloudpickle = pytest.importorskip("cloudpickle")
    from controller.client.functions import source_files
    from controller.client.runner import format_traceback

    table = {}

    def lookup(key):
        return table[key]  # the KeyError the ValueError is raised from

    def parse(key):
        try:
            return lookup(key)
        except KeyError as exc:
            raise ValueError(f"no such key: {key}") from exc

    def work(keys):
        return [(lambda k: parse(k))(k) for k in keys]

    shipped = cloudpickle.loads(cloudpickle.dumps(work))  # a local function: sent by value
    with pytest.raises(ValueError) as caught:
        shipped(["a"])
    text = format_traceback(caught.value, source_files(work))
    for line in (
        "return table[key]",
        "return lookup(key)",
        'raise ValueError(f"no such key: {key}") from exc',
        "return [(lambda k: parse(k))(k) for k in keys]",
    ):
        assert line in text, text
    assert "<dynamic-code>" not in text and f'File "{__file__}"' in text
    assert "The above exception was the direct cause" in text and text.rstrip().endswith("ValueError: no such key: a")


def test_source_files_follows_partials_methods_and_closures_and_skips_other_callables():
    import functools

    from controller.client.functions import source_files

    def helper():
        return 1

    class Model:
        def forward(self):
            return helper()

        def __call__(self):
            return 2

    found = source_files(functools.partial(Model().forward))
    lines = {key.split(":")[0]: int(key.split(":")[1]) for key in found}
    assert lines == {"forward": Model.forward.__code__.co_firstlineno, "helper": helper.__code__.co_firstlineno}
    assert set(found.values()) == {__file__}
    assert source_files(Model()) == {} and source_files(len) == {}


def test_map_runs_six_items_as_one_sweep_never_more_than_two_at_once(home, gflowd, proj, fake_gpus):
    gflowd("--fake-gpus", fake_gpus)
    (Path(fake_gpus)).write_text("gpus:\n" + "  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n" * 4)
    client = Client(home)

    def square(x):
        import time

        time.sleep(0.3)
        return x * x

    futures = client.map(square, range(6), gpus=1, parallelism=2)
    assert len(futures) == 6 and len({f.sweep for f in futures}) == 1
    assert [f.result(timeout=120) for f in futures] == [0, 1, 4, 9, 16, 25]
    # a child's result is readable before gflowd's next pass counts it in the sweep
    sweep = client.wait(f"sweep/{futures[0].sweep}", "Succeeded", timeout=120)
    assert sweep.parallelism == 2 and sweep.counts.get("Succeeded") == 6
    jobs = [client.get(f.job) for f in futures]
    assert [j.sweep for j in jobs] == [futures[0].sweep] * 6
    events = sorted(
        [(j.start_time, 1) for j in jobs] + [(j.completion_time, -1) for j in jobs]
    )  # an end before a start at a tie
    running, most = 0, 0
    for _, step in events:
        running += step
        most = max(most, running)
    assert most <= 2, [(j.name, j.start_time, j.completion_time) for j in jobs]


def test_functions_that_cannot_travel_or_die_say_which_job_and_why(home, gflowd, proj, fake_gpus):
    gflowd("--fake-gpus", fake_gpus)
    client = Client(home)
    lock = threading.Lock()
    with pytest.raises(GflowError, match=r"cannot pickle the function .*holds_a_lock.* for a job: TypeError"):
        client.submit_function(_holder(lock), gpus=0)
    assert not list((home / "jobs").glob("*.yaml"))  # nothing submitted

    def returns_a_lock():
        import threading

        return threading.Lock()

    future = client.submit_function(returns_a_lock, gpus=0)
    with pytest.raises(JobError, match=f"job/{future.job}: the result \\(lock\\) cannot be pickled") as caught:
        future.result(timeout=60)
    assert caught.value.job == future.job and caught.value.reason == "UnpicklableResult"

    def sleeps():
        import time

        time.sleep(60)

    late = client.submit_function(sleeps, gpus=0, job_options={"time": 1})
    with pytest.raises(JobError, match=f"job/{late.job} ended without a result \\(Failed: DeadlineExceeded") as caught:
        late.result(timeout=60)
    assert caught.value.reason == "DeadlineExceeded"

    def hogs_memory():
        x = bytearray(600 * 1024 * 1024)
        for i in range(0, len(x), 4096):
            x[i] = 1
        return len(x)

    hog = client.submit_function(hogs_memory, gpus=0, job_options={"memory": "200Mi"})
    with pytest.raises(JobError, match=f"job/{hog.job} ended without a result \\(Failed: OOMKilled") as caught:
        hog.result(timeout=60)
    assert caught.value.reason == "OOMKilled"

    def dies():
        os._exit(3)

    dead = client.submit_function(dies, gpus=0)
    with pytest.raises(JobError, match=f"job/{dead.job} ended without a result \\(Failed: Error"):
        dead.result(timeout=60)

    def returns_a_trap():
        return _Trap()

    trapped = client.submit_function(returns_a_trap, gpus=0)
    with pytest.raises(
        JobError, match=f"job/{trapped.job}: its result cannot be unpickled here: RuntimeError: no way back"
    ):
        trapped.result(timeout=60)

    waiting = client.submit_function(sleeps, gpus=0)
    with pytest.raises(TimeoutError, match=f"job/{waiting.job} has not finished after 0.1s"):
        waiting.result(timeout=0.1)
    assert waiting.cancel() is True
    with pytest.raises(JobError, match=f"job/{waiting.job} was cancelled before it returned a result"):
        waiting.result(timeout=60)


def _holder(lock):
    def holds_a_lock():
        return lock

    return holds_a_lock


def _refuse():
    raise RuntimeError("no way back")


class _Trap:
    """Pickles fine there; unpickling it here calls ``_refuse``."""

    def __reduce__(self):
        return (_refuse, ())


def test_the_worked_example_runs(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)
    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "python_client.py"
    env = {**os.environ, "GFLOW_HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("job/train-") and lines[0].endswith(" submitted")
    assert lines[1] in (
        "one run: {'lr': 0.1, 'loss': 0.5905, 'gpu': '0'}",
        "one run: {'lr': 0.1, 'loss': 0.5905, 'gpu': '1'}",
    )
    assert lines[2].startswith("sweep/train-") and lines[2].endswith(": 4 jobs")
    assert lines[3] == "best lr 0.3: loss 0.343"
    assert lines[4].startswith("job/sqrt-") and lines[4].endswith(" raised ValueError: math domain error")
    assert len(lines) == 5


@pytest.mark.e2e
def test_importing_the_client_loads_no_heavy_library():
    code = (
        "import sys; from controller.client import Client, GflowError; "
        "print(sorted(m for m in ('pydantic', 'ruamel.yaml', 'cloudpickle', 'mcp', 'controller.decide') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout == "[]\n", done.stderr


def _stale_index_home(home: Path, lock_fd_holder: list[int]) -> tuple:
    """A home as gflowd leaves it between a status write and the coalesced index write that follows
    (record/writer.py ``write_index``): job ``done`` Succeeded in its status file, Running in the
    index. The test holds gflowd's lock, as a running gflowd does; the returned call catches the
    index up."""
    import fcntl
    import json

    from controller.paths import Home
    from controller.util.fsutil import atomic_write

    layout = Home(home, home / "jobs")
    layout.status_dir.mkdir(parents=True, exist_ok=True)
    layout.index_file.parent.mkdir(parents=True, exist_ok=True)
    layout.status_file("done").write_text(
        "apiVersion: gflow.dev/v1\nkind: JobStatus\nmetadata:\n  name: done\n"
        "status:\n  phase: Succeeded\n  attempt: 1\n  exitCode: 0\n"
    )

    def index(phase: str) -> None:
        row = {"phase": phase, "reason": phase, "attempt": 1, "gpus": 0, "priority": 0, "labels": {}}
        atomic_write(layout.index_file, json.dumps({"jobs": {"done": row}}).encode())

    index("Running")
    old = os.stat(layout.status_file("done")).st_mtime - 3600
    os.utime(layout.index_file, (old, old))  # written before the status file, as the pass before did
    fd = os.open(layout.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    lock_fd_holder.append(fd)
    return layout, lambda: index("Succeeded")


@pytest.mark.parametrize("waiter", ["client", "gflowctl"])
def test_wait_returns_only_once_the_index_list_reads_shows_the_phase_too(home, monkeypatch, waiter, capsys):
    """``wait`` then ``list``/``get jobs`` (what scripts do) must agree: wait read the status file
    while the coalesced index still said Running, and list missed the job (CI, under load)."""
    from controller.client.read import state

    # the catch-up below comes long before this, on any machine
    monkeypatch.setattr(state, "INDEX_LAG_MAX", 120.0)
    fds: list[int] = []
    layout, catch_up = _stale_index_home(home, fds)
    stale_seen = threading.Event()
    read_index = state.read_index

    def watched_read_index(h):
        index = read_index(h)
        if index and index["jobs"]["done"]["phase"] == "Running":
            stale_seen.set()
        return index

    monkeypatch.setattr(state, "read_index", watched_read_index)
    client = Client(home)
    result: list = []
    if waiter == "client":
        waiting = threading.Thread(target=lambda: result.append(client.wait("done", timeout=120)))
    else:
        from controller.cli.wait import wait

        waiting = threading.Thread(
            target=lambda: result.append(wait(layout, [("job", "done")], "phase=Succeeded", "120s"))
        )
    try:
        waiting.start()
        assert stale_seen.wait(60), "wait never looked at the index"
        assert waiting.is_alive(), "wait returned while the index still said Running"
        catch_up()
        waiting.join(60)
        assert not waiting.is_alive() and result
        assert [j.name for j in client.list(phase="Succeeded")] == ["done"]
    finally:
        for fd in fds:
            os.close(fd)
