"""Shell completion in a real terminal: bash, zsh and fish under tmux, TAB sent with send-keys and the
screen read back with capture-pane, on a real home whose jobs a real gflowd recorded (and that is
stopped before any TAB: completion reads files, it needs no gflowd). One tmux server for the module,
a fresh window per case."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Daemon, home_cgroups, kill_jobs_of_home, read_index, scrub_cgroups, wait_for

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent  # gflowctl of this checkout (its venv's entry point)
JOBS = ("train", "trial", "other")


def gflowctl(home: Path, *argv: str, cwd: Path) -> str:
    env = {**os.environ, "GFLOW_HOME": str(home)}
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    """A home with jobs train, trial, other and the sweep grid (submitted with gflowctl run, recorded by
    a gflowd that is then stopped), a work folder with a script and a data folder, and a bin folder
    holding the command gflowtrainer."""
    root = tmp_path_factory.mktemp("completion-terminal")
    home, work, bin_dir = root / "home", root / "work", root / "bin"
    for folder in (home / "jobs", work / "data-dir", bin_dir):
        folder.mkdir(parents=True)
    (work / "train.sh").write_text("#!/bin/sh\ntrue\n")
    (bin_dir / "gflowtrainer").write_text("#!/bin/sh\ntrue\n")
    (bin_dir / "gflowtrainer").chmod(0o755)
    for name in JOBS:
        gflowctl(home, "run", "--name", name, "--", "true", cwd=work)
    gflowctl(home, "run", "--name", "grid", "--param", "lr=1,2", "--", "true", cwd=work)
    daemon = Daemon(home, [], root, 1)
    try:
        daemon.wait_ready()
        wait_for(
            lambda: (
                set(JOBS) <= set((read_index(home) or {}).get("jobs") or {}) and (home / "run" / "jobs.table").exists()
            ),
            timeout=60,
            message=lambda: f"gflowd to record the jobs\n{daemon.stderr()[-2000:]}",
        )
    finally:
        daemon.terminate()
        kill_jobs_of_home(home)  # as the gflowd fixture does: no job process or cgroup outlives the module
        scrub_cgroups(home_cgroups(home))
    return root


@pytest.fixture(scope="module")
def terminal(box):
    """``open(shell)`` -> a Pane running that shell, with gflowctl's completion loaded as its docs say."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (.ci/run installs it)")
    socket = f"gflow-completion-{os.getpid()}"  # our own tmux server: no other session is touched
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-s", "main", "-x", "200", "-y", "50"], check=True, timeout=10)
    subprocess.run([*tmux, "set", "-g", "default-size", "200x50"], check=True, timeout=10)
    socket_path = subprocess.run(
        [*tmux, "display-message", "-p", "#{socket_path}"], capture_output=True, text=True, check=True, timeout=10
    ).stdout.strip()
    scripts = {}
    for shell in ("bash", "zsh", "fish"):
        scripts[shell] = box / f"gflowctl.{shell}"
        scripts[shell].write_text(gflowctl(box / "home", "completion", shell, cwd=box))
    rc = {
        # as a user's ~/.bashrc: the listing at the first TAB, no "Display all?" question
        "bash": "PS1='gf> '\nbind 'set show-all-if-ambiguous on'\nbind 'set completion-query-items 0'\n"
        f"source {scripts['bash']}\n",
        "zsh": f"PS1='gf> '\nautoload -U compinit && compinit -u -D\nsource {scripts['zsh']}\n",
        "fish": "function fish_prompt; echo -n 'gf> '; end\nset -g fish_autosuggestion_enabled 0\n"
        f"source {scripts['fish']}\n",
    }
    (box / "zdot").mkdir()
    (box / "zdot" / ".zshrc").write_text(rc["zsh"])
    (box / "bashrc").write_text(rc["bash"])
    (box / "config.fish").write_text(rc["fish"])
    commands = {
        "bash": f"bash --noprofile --rcfile {box / 'bashrc'} -i",
        "zsh": f"ZDOTDIR={box / 'zdot'} zsh -i",
        "fish": f"fish --no-config --private -C {shlex.quote('source ' + str(box / 'config.fish'))}",
    }
    env = {
        "GFLOW_HOME": str(box / "home"),
        "PATH": f"{BIN}:{box / 'bin'}:/usr/bin:/bin",
        "HOME": str(box),
        "XDG_CONFIG_HOME": str(box / "xdg-config"),
        "XDG_DATA_HOME": str(box / "xdg-data"),
        "TERM": "xterm",
    }

    class Pane:
        def __init__(self, shell: str) -> None:
            self.shell = shell
            # env(1), not new-window -e: tmux gives a window the server's PATH, whatever -e says
            command = " ".join(["env", *(shlex.quote(f"{k}={v}") for k, v in env.items()), commands[shell]])
            argv = [*tmux, "new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(box / "work"), command]
            self.id = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=10).stdout.strip()
            self.wait(r"^gf>", "the prompt")

        def screen(self) -> str:
            return subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", self.id], capture_output=True, text=True, timeout=10
            ).stdout

        def wait(self, pattern: str, what: str) -> str:
            return wait_for(
                lambda: re.search(pattern, self.screen(), re.M) and self.screen(),
                timeout=30,
                interval=0.05,
                message=lambda: f"{self.shell}: {what} (/{pattern}/) on the screen:\n{self.screen()}",
            )

        def tab(self, line: str) -> None:
            subprocess.run([*tmux, "send-keys", "-t", self.id, "-l", line], check=True, timeout=10)
            subprocess.run([*tmux, "send-keys", "-t", self.id, "Tab"], check=True, timeout=10)

        def close(self) -> None:
            subprocess.run([*tmux, "kill-pane", "-t", self.id], capture_output=True, timeout=10)

    opened: list[Pane] = []

    def open_pane(shell: str) -> Pane:
        if shutil.which(shell) is None:
            pytest.skip(f"{shell} is not installed (.ci/run installs it)")
        opened.append(Pane(shell))
        return opened[-1]

    yield open_pane
    for pane in opened:
        pane.close()
    subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=10)
    Path(socket_path).unlink(missing_ok=True)  # kill-server leaves the socket file behind


def listed(screen: str, *words: str) -> bool:
    """Every word shown as a candidate (a word of its own below the prompt line)."""
    shown = set(screen.split("\n", 1)[-1].split()) if screen else set()
    return set(words) <= shown


SHELLS = ["bash", "zsh", "fish"]


@pytest.mark.parametrize("shell", SHELLS)
def test_run_flags_complete(terminal, shell):
    pane = terminal(shell)
    pane.tab("gflowctl run --retr")
    pane.wait(r"^gf> gflowctl run --retries\b", "run's --retries completed")
    pane.close()
    pane = terminal(shell)
    pane.tab("gflowctl run --aft")
    pane.wait(r"^gf> gflowctl run --after\b", "run's --after completed")
    pane.tab("oth")
    pane.wait(r"^gf> gflowctl run --after other\b", "--after's job name")


@pytest.mark.parametrize("shell", SHELLS)
def test_export_offers_its_targets_not_a_job(terminal, shell):
    pane = terminal(shell)
    pane.tab("gflowctl export ")
    text = pane.wait(r"\bslurm\b", "the targets listed")
    assert listed(text, "k8s", "slurm") and "job/" not in text, text
    pane.close()
    pane = terminal(shell)
    pane.tab("gflowctl export sl")
    pane.wait(r"^gf> gflowctl export slurm\b", "slurm completed")
    pane.tab("oth")
    pane.wait(r"^gf> gflowctl export slurm other\b", "the job after the target")


@pytest.mark.parametrize("shell", SHELLS)
def test_type_slash_name_completes(terminal, shell):
    pane = terminal(shell)
    pane.tab("gflowctl logs job/oth")
    pane.wait(r"^gf> gflowctl logs job/other\b", "job/other completed")
    pane.close()
    pane = terminal(shell)
    pane.tab("gflowctl describe job/tr")
    text = pane.wait(r"job/trial", "job/train and job/trial listed")
    assert listed(text, "job/train", "job/trial"), text
    pane.close()
    pane = terminal(shell)
    pane.tab("gflowctl describe sweep/gr")
    pane.wait(r"^gf> gflowctl describe sweep/grid\b", "sweep/grid completed")


@pytest.mark.parametrize("shell", SHELLS)
def test_run_completes_a_script_then_a_command_after_dashes(terminal, shell):
    pane = terminal(shell)
    pane.tab("gflowctl run --gpus 1 tra")
    pane.wait(r"^gf> gflowctl run --gpus 1 train\.sh\b", "the script file")
    pane.close()
    pane = terminal(shell)
    pane.tab("gflowctl run --gpus 1 -- gflowtr")
    pane.wait(r"^gf> gflowctl run --gpus 1 -- gflowtrainer\b", "the command after --")
    pane.close()
    pane = terminal(shell)
    pane.tab("gflowctl run --workdir data")
    # bash and fish end a folder with its slash; zsh's bashcompinit cannot ask for it per word
    pane.wait(
        r"^gf> gflowctl run --workdir data-dir" + ("\\b" if shell == "zsh" else "/"), "the folder after --workdir"
    )
