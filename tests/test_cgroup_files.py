"""A supervisor's joins of its attempts' cgroups and its steps back out (shim/cgroup_files.py), on
this machine's real hierarchies: the files it keeps open, and a group folder made anew.

Each test runs in a forked child (pytest's own process never changes cgroup) that reports what it
saw on a pipe. Root only; the cgroups made here are named ``gflow-test-<pid>-...`` and removed.
"""

from __future__ import annotations

import json
import os

import pytest

from controller.act.runtime.cgroups import Cgroups, Limits, probe
from controller.act.runtime.shim.child import home_cgroups, join_cgroup

PREFIX = f"gflow-test-{os.getpid()}-"
FOUND = probe()

pytestmark = [
    pytest.mark.e2e,  # a forked child joins the cgroups
    pytest.mark.skipif(os.geteuid() != 0, reason="cgroup tests need root (or a delegated cgroup)"),
    pytest.mark.skipif(FOUND.mode == "none", reason=f"no usable cgroups here: {FOUND.reason}"),
]


@pytest.fixture
def cgroups(request):
    made_prefix = PREFIX + request.node.name.removeprefix("test_")[:30].strip("_").replace("_", "-")
    made = Cgroups(FOUND, made_prefix)
    made.prepare()
    yield made
    for name in made.names():
        attempt = made.adopt(name)
        if attempt is not None:
            attempt.kill_all()
            attempt.remove()
    made.remove_group()
    _remove_left(made_prefix)


def _remove_left(group: str) -> None:
    """The folder ``group`` and what is left in it, removed bottom-up in every hierarchy: in
    full-suite runs the folder-made-anew test left its first ``a-1`` in the devices, cpuacct and
    unified hierarchies (not reproduced alone), and so the group folders. The child is reaped by now."""
    for base in FOUND.dirs.values():
        for root, _dirs, _files in os.walk(os.path.join(base, group), topdown=False):
            try:
                os.rmdir(root)
            except OSError:
                pass


def procs_of(attempt) -> list[str]:
    """The launch record's ``procs`` (act/runtime/backends/local/attempt_cgroups.py)."""
    return [os.path.join(directory, "cgroup.procs") for directory in attempt.dirs.values()]


def in_child(work, meanwhile=lambda: None) -> dict:
    """``work()``'s dict, computed in a forked child (``meanwhile()`` runs here as it works); its
    exception's text as {"error": ...}."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            result = work()
        except BaseException as exc:
            result = {"error": repr(exc)}
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    meanwhile()
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def own_cgroups() -> set[str]:
    with open("/proc/self/cgroup") as handle:
        return {line.strip() for line in handle if line.strip()}


def procs_files_open() -> int:
    """This process's descriptors open on a ``cgroup.procs``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").endswith("/cgroup.procs")
        except OSError:
            pass
    return count


def test_attempts_are_joined_and_left_keeping_only_the_files_stepped_back_to(cgroups):
    first = cgroups.create("a-1", Limits())
    second = cgroups.create("b-1", Limits())

    def work() -> dict:
        home = own_cgroups()
        seen = {}
        for attempt in (first, second, first):
            back = home_cgroups(procs_of(attempt))  # found before the first join, as a supervisor does
            join_cgroup(procs_of(attempt), keep="folder")
            seen[attempt.name] = sorted(own_cgroups() - home)
            join_cgroup(back or [], keep="file")
            seen["back"] = own_cgroups() == home
            seen.setdefault("open", []).append(procs_files_open())
        return seen

    seen = in_child(work)
    assert "error" not in seen, seen
    assert seen["back"] is True
    assert seen["a-1"] and all(line.endswith("/a-1") for line in seen["a-1"])
    assert seen["b-1"] and all(line.endswith("/b-1") for line in seen["b-1"])
    homes = len(home_cgroups(procs_of(first)) or [])
    assert seen["open"] == [homes] * 3  # the files stepped back to stay open, and only those


def test_an_attempt_in_a_group_folder_made_anew_is_still_joined(cgroups):
    first = procs_of(cgroups.create("a-1", Limits()))
    second = [path.replace("/a-1/", "/a-2/") for path in first]
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()

    def work() -> dict:
        home, back = own_cgroups(), home_cgroups(first)
        join_cgroup(first, keep="folder")  # keeps the group folder's descriptor
        join_cgroup(back or [], keep="file")
        os.write(ready_w, b"x")
        os.read(go_r, 1)  # meanwhile the group folder is removed and made again
        join_cgroup(second, keep="folder")
        joined = sorted(own_cgroups() - home)
        join_cgroup(back or [], keep="file")
        return {"joined": joined, "back": own_cgroups() == home}

    def remake_the_group() -> None:
        os.close(ready_w)  # the child's copy is the only writer: its death reads as EOF
        assert os.read(ready_r, 1) == b"x", "the child failed before its first join"
        cgroups.adopt("a-1").remove()
        cgroups.remove_group()
        cgroups.prepare()
        cgroups.create("a-2", Limits())
        os.write(go_w, b"x")

    result = in_child(work, meanwhile=remake_the_group)
    assert "error" not in result, result
    assert result["joined"] and all(line.endswith("/a-2") for line in result["joined"])
    assert result["back"] is True
