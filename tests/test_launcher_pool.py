"""The launcher's pool of supervisors (``shim/launcher.py`` ``_Pool``): which supervisor takes an
attempt, driven through its real pipes as gflowd and the supervisors drive it.

A supervisor is given a next attempt only once gflowd purged its last one. In a burst gflowd often
reads an exit record, purges it and starts the next jobs before that attempt's supervisor has said
"done" (it writes the exit record first); the pool then forked a new supervisor for the start
(a Python process: ~2-3 ms of copy-on-write faults each), 80-430 forks per 1,000 `true` jobs.
"""

from __future__ import annotations

import os

import pytest

from controller.act.runtime.shim import launcher


@pytest.fixture
def pool(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a supervisor forked by mistake leaves its trace here, not in the checkout
    made = launcher._Pool()
    yield made
    for fd in (*made.tasks.values(), made.said_r, made.said_w):
        os.close(fd)


def _supervisor(pool: launcher._Pool, pid: int, serving: bytes | None) -> int:
    """A supervisor of the pool (``pid``), serving ``serving`` (None: idle); the read end of its
    pipe of record paths, which the test reads in its place."""
    task_r, task_w = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(task_r, False)
    pool.tasks[pid] = task_w
    if serving is None:
        pool.idle[pid] = 0.0
    else:
        pool.serving[pid], pool.by_path[serving] = serving, pid
    return task_r


def _handed(task_r: int) -> bytes:
    try:
        return os.read(task_r, 4096)
    except BlockingIOError:
        return b""


def test_a_supervisor_purged_before_it_said_done_takes_the_next_attempt_without_a_fork(pool):
    task_r = _supervisor(pool, 101, b"/h/run/attempts/a.1")
    try:
        pool._purged(b"/h/run/attempts/a.1")  # gflowd read a's exit record before a's supervisor said done
        pool._hand(b"/h/run/attempts/b.1")  # and the same pass starts b
        assert _handed(task_r) == b"/h/run/attempts/b.1\n"  # read once it is done with a
        assert list(pool.tasks) == [101]  # no supervisor forked
        pool._heard(b"done 101")
        assert pool.serving == {101: b"/h/run/attempts/b.1"} and not pool.idle and not pool.purged
        pool._heard(b"done 101")  # b ended; its purge, not a's, frees the supervisor
        assert not pool.idle
        pool._purged(b"/h/run/attempts/b.1")
        assert list(pool.idle) == [101] and pool.serving == {}
    finally:
        os.close(task_r)


def test_an_attempt_handed_ahead_to_a_supervisor_that_ends_instead_goes_to_another(pool):
    first = _supervisor(pool, 101, b"/h/run/attempts/a.1")
    second = None
    try:
        pool._purged(b"/h/run/attempts/a.1")
        pool._hand(b"/h/run/attempts/b.1")
        assert _handed(first) == b"/h/run/attempts/b.1\n"
        second = _supervisor(pool, 102, None)  # another one freed meanwhile
        pool._heard(b"gone 101")  # a's supervisor ends (REUSE_MAX, or an attempt it may not follow): b is unread
        assert 101 not in pool.tasks
        assert _handed(second) == b"/h/run/attempts/b.1\n"
        assert pool.serving == {102: b"/h/run/attempts/b.1"} and pool.by_path == {b"/h/run/attempts/b.1": 102}
    finally:
        os.close(first)
        if second is not None:
            os.close(second)
