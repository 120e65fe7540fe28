"""Whose job a manifest is, against a real root gflowd and a hostile user (docs/multi-user.md,
"Manifest identity and symlinks").

The attacker is a forked child that dropped to uid 65534 (nobody) and works only in its own folder
of the spec dir: it swaps its manifest with its own symlink to root's manifest (finding 2 of issue
14), links to root's manifest beside its own ``run.sh`` (finding 3), or flips its own entry between a
file and a symlink to make every pass fail for everyone (finding 7). A job run as uid 0 on its
behalf, or a failed pass, fails the test.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import job_status, wait_for, wait_phase, write_manifest

from controller.model.documents import AdmittedJob

NOBODY = 65534
AT_FDCWD = -100
RENAME_EXCHANGE = 2
# How long the swap race runs: long enough to lose on the old code within CI's budget; set
# GFLOW_RACE_SECONDS higher to hunt harder.
RACE_SECONDS = float(os.environ.get("GFLOW_RACE_SECONDS", "25"))

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run gflowd as root and act as nobody")

_libc = ctypes.CDLL(None, use_errno=True)  # loaded before any fork: the child may not read it later


@dataclass
class Lab:
    root: Path
    home: Path
    spec: Path
    admin: Path  # root's folder in the spec dir
    mine: Path  # nobody's folder in the spec dir
    runs: Path  # every job appends "<job> <uid> <cwd>" here

    def run_lines(self) -> list[str]:
        return self.runs.read_text().splitlines()


@pytest.fixture
def lab():
    root = Path(tempfile.mkdtemp(prefix="gflow-sec-identity-"))
    os.chmod(root, 0o755)  # nobody's jobs must reach their folder
    home = root / "home"
    spec = home / "jobs"
    admin, mine = spec / "admin", spec / "mine"
    for folder in (home, spec, admin, mine):
        folder.mkdir(mode=0o755, exist_ok=True)
        os.chmod(folder, 0o755)
    os.chown(mine, NOBODY, NOBODY)
    runs = root / "runs"
    runs.touch()
    os.chmod(runs, 0o666)  # root's and nobody's jobs both append to it
    yield Lab(root, home, spec, admin, mine, runs)
    shutil.rmtree(root, ignore_errors=True)


def record(lab: Lab) -> str:
    """A job command that says who ran it, as whom and where."""
    return f"[sh, -c, 'echo \"$GFLOW_JOB_NAME $(id -u) $PWD\" >> {lab.runs}']"


def owned_by_nobody(*paths: Path) -> None:
    for path in paths:
        os.lchown(path, NOBODY, NOBODY)


def exchange(a: Path, b: Path) -> None:
    """Swap two directory entries atomically (renameat2 RENAME_EXCHANGE), as the attacker does."""
    if _libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


def as_nobody(work: Callable[[], None]) -> int:
    """Fork a child that drops to nobody and runs ``work``; returns its pid."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            work()
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 2
        finally:
            os._exit(code)
    return pid


def wait_child(pid: int, timeout: float) -> int:
    def ended():
        done, status = os.waitpid(pid, os.WNOHANG)
        return os.waitstatus_to_exitcode(status) + 1000 if done else None  # +1000: 0 is an answer too

    try:
        return wait_for(ended, timeout=timeout, interval=0.1, message="the attacker to finish") - 1000
    except AssertionError:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise


def forbidden(home: Path, name: str) -> str | None:
    """The Forbidden message of a job refused outright (Rejected) or refused an edit (the last
    valid spec kept, an Admitted=False condition), else None."""
    status = job_status(home, name) or {}
    if status.get("phase") == "Rejected" and status.get("reason") == "Forbidden":
        return status["message"]
    admitted = next((c for c in status.get("conditions") or [] if c.get("type") == "Admitted"), {})
    return admitted.get("message") if admitted.get("reason") == "Forbidden" else None


# -- finding 2: owner and text come from one open file -------------------------------------------------


def test_swapping_a_manifest_with_a_symlink_to_roots_never_records_or_runs_it_as_root(lab, gflowd):
    write_manifest(lab.admin, "target.yaml", f"metadata: {{name: admin-target}}\nspec:\n  command: {record(lab)}\n")
    evil = write_manifest(lab.mine, "evil.yaml", f"metadata: {{name: evil}}\nspec:\n  command: {record(lab)}\n")
    swap = lab.mine / ".swap"  # hidden: never read as a manifest itself
    os.symlink("../admin/target.yaml", swap)
    owned_by_nobody(evil, swap)
    daemon = gflowd(home=lab.home)
    wait_phase(lab.home, "evil", "Succeeded", daemon=daemon)
    wait_phase(lab.home, "admin-target", "Succeeded", daemon=daemon)

    def attack() -> None:
        # Bursts of exchanges, each ending with the symlink at evil.yaml and then resting there, so a
        # read that took root's stat with the attacker's text stays cached; before each burst the
        # attacker edits its own text (a new rerun annotation), so every burst is a new run.
        deadline = time.monotonic() + RACE_SECONDS
        burst = 0
        while time.monotonic() < deadline:
            burst += 1
            # at rest the regular file is at .swap: edit it in place (same inode, still nobody's)
            with open(swap, "w") as handle:
                handle.write(
                    f"metadata:\n  name: evil\n  annotations: {{gflow.dev/rerun: '{burst}'}}\n"
                    f"spec:\n  command: {record(lab)}\n"
                )
            flips = 0
            until = time.monotonic() + 0.25
            while time.monotonic() < until or flips % 2 == 1:
                exchange(evil, swap)
                flips += 1
            time.sleep(0.25)

    # rest state before the race: the file at .swap, the symlink at evil.yaml
    exchange(evil, swap)
    attacker = as_nobody(attack)
    assert wait_child(attacker, RACE_SECONDS + 30) == 0
    assert evil.is_symlink()  # the attacker's last move: root's manifest under its name
    daemon.wait_pass()
    wait_for(
        lambda: (job_status(lab.home, "evil") or {}).get("phase") in ("Rejected", "Succeeded", "Failed"),
        timeout=15,
        message=lambda: f"evil to settle: {job_status(lab.home, 'evil')!r}",
    )
    as_root = [line for line in lab.run_lines() if line.split()[:2] == ["evil", "0"]]
    assert not as_root, f"the attacker's job ran as root {len(as_root)} time(s)"
    # root's manifest under the attacker's name is refused; the attacker's last own spec is kept
    refusal = wait_for(
        lambda: forbidden(lab.home, "evil"), message=lambda: f"evil refused: {job_status(lab.home, 'evil')!r}"
    )
    assert refusal.startswith(
        "jobs/mine/evil.yaml is a symlink owned by nobody to jobs/admin/target.yaml, owned by root"
    )
    assert "reconcile pass failed" not in daemon.stderr()
    assert daemon.proc.poll() is None


# -- finding 3 and the symlink rule ---------------------------------------------------------------------


def test_a_symlink_to_another_users_manifest_is_refused_and_a_job_runs_where_its_file_lives(lab, gflowd):
    # root's backup job: no metadata.name, runs run.sh from its own folder
    (lab.admin / "run.sh").write_text(f'echo "$GFLOW_JOB_NAME $(id -u) $PWD ADMIN-CODE" >> {lab.runs}\n')
    write_manifest(lab.admin, "backup.yaml", "spec:\n  command: [bash, run.sh]\n")
    # nobody links it into its own folder, beside its own run.sh
    user_code = lab.mine / "run.sh"
    user_code.write_text(f'echo "$GFLOW_JOB_NAME $(id -u) $PWD USER-CODE" >> {lab.runs}\n')
    link = lab.mine / "mybackup.yaml"
    os.symlink("../admin/backup.yaml", link)
    # a symlink between nobody's own files is followed, and the job runs where the file really lives
    real = lab.mine / "real"
    real.mkdir()
    (real / "run.sh").write_text(f'echo "$GFLOW_JOB_NAME $(id -u) $PWD REAL-FOLDER" >> {lab.runs}\n')
    write_manifest(real, "own.yaml", "spec:\n  command: [bash, run.sh]\n")
    alias = lab.mine / "alias.yaml"
    os.symlink("real/own.yaml", alias)
    owned_by_nobody(user_code, link, real, real / "run.sh", real / "own.yaml", alias)
    # an admin's symlink to nobody's file is refused just the same: owners must match
    os.symlink("../mine/real/own.yaml", lab.admin / "adopted.yaml")

    daemon = gflowd(home=lab.home)
    wait_phase(lab.home, "backup", "Succeeded", daemon=daemon)
    wait_phase(lab.home, "alias", "Succeeded", daemon=daemon)
    wait_phase(lab.home, "own", "Succeeded", daemon=daemon)
    wait_phase(lab.home, "mybackup", ("Rejected", "Succeeded", "Failed"), daemon=daemon)
    daemon.wait_pass()
    assert sorted(lab.run_lines()) == sorted(
        [
            f"backup 0 {lab.admin} ADMIN-CODE",
            f"alias {NOBODY} {real} REAL-FOLDER",
            f"own {NOBODY} {real} REAL-FOLDER",
        ]
    )
    refused = wait_phase(lab.home, "mybackup", "Rejected", reason="Forbidden", daemon=daemon)
    assert refused["message"] == (
        "jobs/mine/mybackup.yaml is a symlink owned by nobody to jobs/admin/backup.yaml, owned by root: "
        "gflowd runs a manifest only as its owner and never on another user's behalf; "
        "copy the file instead, or have its owner make the link"
    )
    adopted = wait_phase(lab.home, "adopted", "Rejected", reason="Forbidden", daemon=daemon)
    assert "symlink owned by root to jobs/mine/real/own.yaml, owned by nobody" in adopted["message"]
    assert job_status(lab.home, "mybackup")["phase"] == "Rejected"  # still: nothing ran under its name


# -- finding 7: one entry's trouble is that entry's -----------------------------------------------------


def test_a_user_flipping_an_entry_between_file_and_symlink_never_fails_the_pass_for_others(lab, gflowd):
    flip = write_manifest(lab.mine, "flip.yaml", "spec:\n  command: ['true']\n")
    target = lab.mine / "flip.txt"  # not a manifest name: read only through the link
    target.write_text("spec:\n  command: ['true']\n")
    other = lab.mine / ".other"
    os.symlink("flip.txt", other)
    owned_by_nobody(flip, target, other)
    daemon = gflowd(home=lab.home)

    def attack() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            exchange(flip, other)

    attacker = as_nobody(attack)
    try:
        names = []
        for i in range(12):  # root's neighbours arrive while the flipping goes on
            name = f"neighbour-{i}"
            write_manifest(lab.admin, f"{name}.yaml", f"spec:\n  command: {record(lab)}\n")
            names.append(name)
            wait_phase(lab.home, name, "Succeeded", timeout=20, daemon=daemon)
    finally:
        assert wait_child(attacker, 40) == 0
    daemon.wait_pass()
    assert "reconcile pass failed" not in daemon.stderr(), daemon.stderr()[-3000:]
    assert "Traceback" not in daemon.stderr(), daemon.stderr()[-3000:]
    assert sorted(line.split()[0] for line in lab.run_lines()) == sorted(names)
    assert daemon.proc.poll() is None


# -- the store, in process: the rule case by case ------------------------------------------------------


@pytest.fixture
def spec(tmp_path):
    from test_store import SpecDir

    return SpecDir(tmp_path)


def only(spec, name: str):
    return next(d for d in spec.store.documents() if d.name == name)


def test_the_owner_is_the_read_files_and_an_admins_chown_is_seen(spec):
    path = spec.write("a.yaml")
    spec.store.scan()
    assert only(spec, "a").owner_uid == 0
    before = os.stat(path)
    os.chown(path, NOBODY, NOBODY)  # mtime, size and inode stay: the owner is part of the key
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns
    spec.store.scan()
    assert only(spec, "a").owner_uid == NOBODY


@pytest.mark.parametrize(("link_owner", "file_owner"), [(NOBODY, 0), (0, NOBODY)])
def test_a_symlink_and_its_target_of_different_owners_are_refused(spec, link_owner, file_owner):
    target = spec.write("team/real.yaml")
    os.chown(target, file_owner, file_owner)
    os.symlink("team/real.yaml", spec.path("alias.yaml"))
    os.lchown(spec.path("alias.yaml"), link_owner, link_owner)
    spec.store.scan()
    refused = only(spec, "alias")
    names = {0: "root", NOBODY: "nobody"}
    assert (refused.reason, refused.source) == ("Forbidden", "jobs/alias.yaml")
    assert refused.message.startswith(
        f"jobs/alias.yaml is a symlink owned by {names[link_owner]} to jobs/team/real.yaml, owned by {names[file_owner]}: "
    )
    assert only(spec, "real").owner_uid == file_owner  # the file itself is its owner's job as ever
    # the fix the message names: the file's owner makes the link; the next look admits it
    os.lchown(spec.path("alias.yaml"), file_owner, file_owner)
    spec.store.scan()
    alias = only(spec, "alias")
    assert isinstance(alias, AdmittedJob) and alias.owner_uid == file_owner


def test_a_symlinked_folder_of_another_owner_is_refused_for_each_manifest_in_it(spec):
    spec.write(".private/backup.yaml")  # root's, in a folder the walk does not read itself
    os.makedirs(spec.path("mine"))
    os.symlink("../.private", spec.path("mine/borrowed"))
    os.lchown(spec.path("mine/borrowed"), NOBODY, NOBODY)
    spec.store.scan()
    refused = only(spec, "backup")
    assert (refused.reason, refused.source) == ("Forbidden", "jobs/mine/borrowed/backup.yaml")
    assert refused.message.startswith(
        "jobs/mine/borrowed/backup.yaml is reached through jobs/mine/borrowed, a symlink owned by nobody, "
        "to jobs/.private/backup.yaml, owned by root: "
    )


def test_a_folder_is_read_under_its_own_path_before_anyones_symlink_to_it(spec):
    spec.write("admin/backup.yaml")  # root's
    for i in range(20):  # a folder lists in hash order: some of these come before admin/
        os.symlink("admin", spec.path(f"link-{i}"))
        os.lchown(spec.path(f"link-{i}"), NOBODY, NOBODY)
    spec.store.scan()
    assert spec.sources() == ["jobs/admin/backup.yaml"]
    assert isinstance(only(spec, "backup"), AdmittedJob)


def test_a_job_reached_through_a_symlink_runs_in_the_folder_its_file_lives_in(spec, tmp_path):
    from controller.act.runtime.command import build_process
    from controller.model.plan import Launch

    spec.write("real/plain.yaml", "spec:\n  command: ['true']\n")
    spec.write("real/relative.yaml", "spec:\n  command: ['true']\n  workingDir: sub\n")
    os.makedirs(spec.path("real/sub"))
    for name in ("plain", "relative"):
        os.symlink(f"real/{name}.yaml", spec.path(f"link-{name}.yaml"))
    spec.store.scan()
    real = os.path.realpath(spec.path("real"))
    for name, cwd in (
        ("link-plain", real),
        ("link-relative", os.path.join(real, "sub")),
        ("plain", str(spec.path("real"))),
        ("relative", str(spec.path("real/sub"))),
    ):
        job = only(spec, name)
        process = build_process(Launch(name, 1, 1, job, [], []), {"PATH": os.environ["PATH"]}, tmp_path / "s.sh", 29500)
        assert process.cwd == cwd, name
    assert only(spec, "link-plain").real_dir == real and only(spec, "plain").real_dir is None
