"""hack/labbox/run.sh on a machine that cannot boot the lab box: one line, and rc 0 unless --require (CI)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

RUN = Path(__file__).resolve().parent.parent / "hack" / "labbox" / "run.sh"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    # A PATH with the shell's tools but no qemu: the runner must notice before it builds anything.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("bash", "dirname", "date", "cat"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).unlink(missing_ok=True)
        (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir), "LABBOX_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    return subprocess.run([shutil.which("bash"), str(RUN), *args], capture_output=True, text=True, env=env, timeout=60)


def test_without_qemu_it_says_skipped_in_one_line_and_exits_0(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "labbox: skipped: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86 qemu-utils)"
    ]
    assert not (tmp_path / "cache").exists()


def test_with_require_a_missing_qemu_fails_the_run(tmp_path):
    done = _run(tmp_path, "--require")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "labbox: FAILED: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86 qemu-utils)"
    ]


def test_an_unknown_argument_is_named(tmp_path):
    done = _run(tmp_path, "--tset", "x")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["labbox: unknown argument --tset (see --help)"]
