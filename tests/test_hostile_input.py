"""Hostile input against a real running gflowd: each bad file is contained.

One gflowd serves the whole module, with a neighbour job running and a finished one. Every case
drops its file(s) into the spec directory, then checks what a user would: the controller is alive,
the neighbours are untouched (same pid, same phase), and the bad file got a Rejected status or a
Warning event naming it. Each case then removes its files, so the next starts clean.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import Daemon, job_status, kill_jobs_of_home, pid_alive, wait_for, wait_phase, write_manifest
from test_security import as_nobody  # noqa: F401  (gflowd as user nobody)

GOOD = "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {{name: {name}}}\nspec:\n  command: [{cmd}]\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    home = root / "home"
    (home / "jobs").mkdir(parents=True)
    write_manifest(home / "jobs", "neighbour.yaml", GOOD.format(name="neighbour", cmd="sleep, '600'"))
    write_manifest(home / "jobs", "done.yaml", GOOD.format(name="done", cmd="'true'"))
    daemon = Daemon(home, [], root, 1).wait_ready()
    running = wait_for(
        lambda: (job_status(home, "neighbour") or {}).get("pid") and job_status(home, "neighbour"),
        message="the neighbour job to run",
    )
    wait_phase(home, "done", "Succeeded", daemon=daemon)
    world = World(home, daemon, running["pid"], root)
    yield world
    daemon.terminate()
    kill_jobs_of_home(home)


class World:
    def __init__(self, home: Path, daemon: Daemon, neighbour_pid: int, root: Path):
        self.home, self.spec, self.daemon, self.neighbour_pid, self.root = (
            home,
            home / "jobs",
            daemon,
            neighbour_pid,
            root,
        )
        self.created: list[Path] = []

    def events(self) -> list[dict]:
        try:
            lines = (self.home / "events.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    def warning_naming(self, needle: str) -> dict | None:
        return next((e for e in self.events() if e["type"] == "Warning" and needle in e["message"]), None)

    def rejected(self, name: str, needle: str, reason: str | None = None, timeout: float = 15) -> dict:
        def check():
            status = job_status(self.home, name)
            if (
                status
                and status.get("phase") == "Rejected"
                and needle in status.get("message", "")
                and (reason is None or status.get("reason") == reason)
            ):
                return status
            return None

        return wait_for(
            check,
            timeout=timeout,
            message=lambda: (
                f"{name} Rejected with {needle!r}; "
                f"status: {job_status(self.home, name)!r}\n{self.daemon.stderr()[-2000:]}"
            ),
        )

    def contained(self, full_pass: bool = False) -> None:
        """The controller still serves and neighbours are as they were."""
        assert self.daemon.proc.poll() is None, self.daemon.stderr()[-3000:]
        if full_pass:
            self.daemon.wait_pass()
        neighbour = job_status(self.home, "neighbour")
        assert neighbour["phase"] == "Running" and neighbour["pid"] == self.neighbour_pid
        assert pid_alive(self.neighbour_pid)
        assert job_status(self.home, "done")["phase"] == "Succeeded"

    def put(self, relative: str, data: bytes | str) -> Path:
        path = self.spec / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.tmp"
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        os.rename(tmp, path)
        self.created.append(path)
        return path

    def cleanup(self) -> None:
        for path in reversed(self.created):
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)
        self.created.clear()


@pytest.fixture
def w(world):
    yield world
    world.cleanup()
    world.contained(full_pass=True)


def test_binary_file(w):
    w.put("bin.yaml", b"\x7fELF\x02\x01\x01\x00\x00\x00" * 50)
    w.rejected("bin", "file is binary, not YAML text (jobs/bin.yaml)")
    w.contained()


def test_file_over_one_mib(w):
    w.put("big.yaml", GOOD.format(name="big", cmd="'true'") + "# " + "x" * (1024 * 1024) + "\n")
    status = w.rejected("big", "over the 1 MiB limit")
    assert "jobs/big.yaml" in status["message"]
    w.contained()


def test_non_utf8(w):
    w.put("latin.yaml", GOOD.format(name="latin", cmd="echo, 'caf\xe9'").encode("latin-1"))
    w.rejected("latin", "not UTF-8 text")
    w.contained()


def test_billion_laughs_alias_bomb(w):
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    bomb = "metadata: {name: bomb}\nspec:\n  command: [echo]\n  env: {}\n" + "\n".join(lines) + "\n"
    w.put("bomb.yaml", bomb)
    w.rejected("bomb", "aliases", "YAMLError")
    w.contained()


def test_alias_that_contains_itself(w):
    w.put("loop-alias.yaml", "metadata: {name: loop-alias}\nspec: &s\n  command: [echo]\n  again: *s\n")
    w.rejected("loop-alias", "refers to itself", "YAMLError")
    w.contained()


def test_very_deep_nesting(w):
    w.put("deep.yaml", "metadata: {name: deep}\nspec:\n  command: " + "[" * 100_000 + "]" * 100_000 + "\n")
    w.rejected("deep", "nested too deeply")
    w.contained()


def test_symlink_leaving_the_spec_dir_is_not_followed(w):
    outside = w.root / "outside.yaml"
    outside.write_text(GOOD.format(name="escapee", cmd="'true'"))
    link = w.spec / "escapee.yaml"
    link.symlink_to(outside)
    w.created.append(link)
    wait_for(lambda: w.warning_naming("jobs/escapee.yaml"), message="a Warning naming the symlink")
    assert "outside the spec directory" in w.warning_naming("jobs/escapee.yaml")["message"]
    assert job_status(w.home, "escapee") is None  # never run, never given a status
    w.contained()


def test_symlink_loops(w):
    (w.spec / "loopdir").symlink_to(".")  # a folder loop: jobs/loopdir/loopdir/...
    (w.spec / "self.yaml").symlink_to("self.yaml")  # ELOOP
    w.created += [w.spec / "loopdir", w.spec / "self.yaml"]
    w.put("after-loops.yaml", GOOD.format(name="after-loops", cmd="'true'"))
    wait_phase(w.home, "after-loops", "Succeeded", daemon=w.daemon)
    wait_for(lambda: w.warning_naming("jobs/self.yaml"), message="a Warning naming the looping symlink")
    w.contained()


def test_directory_named_like_a_manifest(w):
    (w.spec / "x.yaml").mkdir()
    w.created.append(w.spec / "x.yaml")
    w.put("x.yaml/inner.yaml", GOOD.format(name="inner", cmd="'true'"))
    wait_phase(w.home, "inner", "Succeeded", daemon=w.daemon)  # a folder: walked into, not read as a file
    assert job_status(w.home, "x") is None
    w.contained()


def test_fifo_named_like_a_manifest_never_blocks_the_loop(w):
    os.mkfifo(w.spec / "pipe.yaml")
    w.created.append(w.spec / "pipe.yaml")
    wait_for(lambda: w.warning_naming("jobs/pipe.yaml"), message="a Warning naming the FIFO")
    w.contained()


@pytest.mark.parametrize(
    ("filename", "name", "where"),
    [
        ("slash.yaml", "a/b", "slash"),
        ("dots.yaml", "..", "dots"),
        ("long.yaml", "x" * 64, "long"),
        ("Upper.yaml", "Bad_Name", None),
    ],
)
def test_invalid_names(w, filename, name, where):
    w.put(filename, GOOD.format(name=json.dumps(name), cmd="'true'"))
    if where is not None:  # the file stem is a valid name: the Rejected status goes there
        status = w.rejected(where, "metadata.name")
        assert "not a valid name" in status["message"]
    else:  # neither is valid: just a Warning event naming the file
        wait_for(lambda: w.warning_naming(f"jobs/{filename}"), message=f"a Warning naming jobs/{filename}")
    w.contained()


def test_same_name_in_two_files(w):
    w.put("twin-a.yaml", GOOD.format(name="neighbour", cmd="'true'"))
    status = w.rejected("twin-a", "already defined in jobs/neighbour.yaml", "DuplicateName")
    assert "jobs/twin-a.yaml" in status["message"]
    w.contained()


@pytest.mark.parametrize(
    ("filename", "text", "needle"),
    [
        (
            "kind.yaml",
            "apiVersion: gflow.dev/v1alpha1\nkind: Pod\nspec: {command: ['true']}\n",
            "kind: 'Pod' is not supported",
        ),
        ("api.yaml", "apiVersion: v1\nkind: Job\nspec: {command: ['true']}\n", "apiVersion"),
    ],
)
def test_wrong_kind_or_api_version(w, filename, text, needle):
    w.put(filename, text)
    w.rejected(filename.split(".")[0], needle)
    w.contained()


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("priority", "1" + "0" * 40, "spec.priority"),
        ("timeLimit", "9" * 400, "spec.timeLimit"),
        ("resources", "{memory: " + "9" * 30 + "Gi}", "spec.resources.memory"),
        ("backoffLimit", "9" * 30, "spec.backoffLimit"),
        ("timeLimit", "-5s", "spec.timeLimit"),
        ("timeLimit", "-30", "spec.timeLimit"),
        ("terminationGracePeriod", "-1s", "spec.terminationGracePeriod"),
    ],
)
def test_huge_integers_and_negative_durations(w, field, value, needle):
    w.put("numbers.yaml", GOOD.format(name="numbers", cmd="'true'") + f"  {field}: {value}\n")
    status = w.rejected("numbers", needle)
    assert "jobs/numbers.yaml line 6" in status["message"]
    w.contained()


def test_a_huge_gpu_count_is_unschedulable_with_the_numbers(w):
    w.put("many.yaml", GOOD.format(name="many", cmd="'true'") + "  resources: {gpus: " + "9" * 30 + "}\n")
    status = wait_phase(w.home, "many", "Pending", reason="Unschedulable", daemon=w.daemon)
    assert status["message"] == f"needs {'9' * 30} GPUs, this machine has no GPUs"
    w.contained()


def test_unreadable_manifest(as_nobody):
    """gflowd as ``nobody`` (as root, every file is readable): a manifest it cannot read is Rejected
    under its stem, and its own manifests run."""
    home, nobody, start = as_nobody
    mine = write_manifest(home / "jobs", "mine.yaml", GOOD.format(name="mine", cmd="'true'"))
    os.chown(mine, nobody.pw_uid, nobody.pw_gid)
    secret = write_manifest(home / "jobs", "secret.yaml", GOOD.format(name="secret", cmd="'true'"))
    os.chmod(secret, 0o600)  # root's, unreadable to nobody
    daemon = start()
    status = wait_phase(home, "secret", "Rejected", daemon=daemon)
    assert status["message"] == "cannot read the file: Permission denied (jobs/secret.yaml)"
    wait_phase(home, "mine", "Succeeded", daemon=daemon)
    assert daemon.proc.poll() is None
