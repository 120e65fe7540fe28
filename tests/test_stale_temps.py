"""Temp files of atomic writes that a kill -9 cut short are removed when gflowd starts again
(issue 32, hole 10: 136 ``status/*.tmp`` after 100 kills, never removed).

A real gflowd is killed with SIGKILL; the temp files its writes leave (``.NAME.<12 hex>.tmp``,
``fsutil.temp_beside``) are put where such a kill leaves them, with look-alikes that are not
gflowd's to remove. The next gflowd removes exactly the former.
"""

from __future__ import annotations

import os
import signal

from helpers import write_manifest


def test_a_restarted_gflowd_removes_the_temp_files_a_killed_one_left_and_nothing_else(home, gflowd):
    write_manifest(home / "jobs", "a.yaml", "metadata: {name: a}\nspec:\n  command: [sleep, '30']\n")
    first = gflowd()
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    token = "0123456789ab"
    stale = [
        home / "status" / f".a.yaml.{token}.tmp",
        home / "run" / f".index.json.{token}.tmp",
        home / "run" / "attempts" / f".a.1.{token}.tmp",
        home / f".node.yaml.{token}.tmp",
    ]
    kept = [
        home / "jobs" / f".a.yaml.{token}.tmp",  # the spec dir is the users': an editor's file
        home / f".config.yaml.{token}.tmp",  # the admin's, not gflowd's
        home / "status" / ".a.yaml.tmp",  # not the pattern of gflowd's temp files
        home / "status" / f".a.yaml.{token}x.tmp",
    ]
    for path in stale + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("half a file")
    os.symlink("/etc/passwd", home / "status" / f".b.yaml.{token}.tmp")  # never followed, never removed
    gflowd()
    assert [p for p in stale if p.exists()] == []
    assert [p for p in kept if not p.exists()] == []
    assert os.path.islink(home / "status" / f".b.yaml.{token}.tmp") and os.path.exists("/etc/passwd")
