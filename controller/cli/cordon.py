"""``gflowctl cordon|drain|uncordon gpu N...``: an admin takes GPUs out of scheduling, as ``kubectl
cordon|drain|uncordon`` does for nodes. Cordon: no new job goes there, running ones stay. Drain:
the jobs on it also return to Pending and run on other GPUs. The desired state is
``HOME/cordon.yaml`` (gflowd reads it within seconds); only HOME's owner may write it."""

from __future__ import annotations

import fcntl
import os
import time

from controller.api.cordon import parse_cordons
from controller.cli.common import CliError
from controller.paths import Home
from controller.util.fsutil import atomic_write
from controller.util.security import user_name
from controller.util.yamlio import dump

HEADER = "# GPUs taken out of scheduling: written by gflowctl cordon|drain|uncordon gpu N (see docs/gpu-health.md)\n"


def gpu_indices(words: list[str]) -> list[int]:
    """``gpu 2 3``, ``gpu/2``, ``gpus 0,1``: the GPU indices named; CliError naming every bad word."""
    if words and words[0] in ("gpu", "gpus"):
        words = words[1:]
    indices: list[int] = []
    bad: list[str] = []
    for word in words:
        for part in word.removeprefix("gpu/").split(","):
            if part.isdigit():
                indices.append(int(part))
            else:
                bad.append(part)
    if bad or not indices:
        what = f"not a GPU index: {', '.join(map(repr, bad))}" if bad else "no GPU named"
        raise CliError(f"{what}; e.g. gflowctl cordon gpu 2 (or gpu/2, gpu 0,1)")
    return sorted(set(indices))


def cordon(home: Home, verb: str, words: list[str], reason: str) -> int:
    indices = gpu_indices(words)
    owner = os.stat(home.root).st_uid
    if os.geteuid() != owner:
        raise CliError(f"only {user_name(owner)}, who owns {home.root}, may {verb} GPUs: sudo gflowctl {verb} gpu ...")
    with open(home.root / ".cordon.lock", "a") as lock:  # two admins at once: neither edit is lost
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            current = parse_cordons(home.cordon_file.read_text())
        except FileNotFoundError:
            current = {}
        except ValueError as exc:
            raise CliError(f"{home.cordon_file}: {exc}; fix it by hand, or delete it to uncordon every GPU") from None
        entries = {index: {"by": c.by, "reason": c.reason, "drain": c.drain} for index, c in sorted(current.items())}
        by = user_name(int(os.environ.get("SUDO_UID", os.getuid())))
        since = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        for index in indices:
            if verb == "uncordon":
                entries.pop(index, None)
            else:
                entries[index] = {"by": by, "reason": reason, "drain": verb == "drain", "since": since}
        atomic_write(home.cordon_file, HEADER + dump({"gpus": entries}) if entries else HEADER + "gpus: {}\n")
    done = {"cordon": "cordoned", "drain": "drained (its jobs return to Pending)", "uncordon": "uncordoned"}[verb]
    for index in indices:
        print(f"gpu/{index} {done}")
    return 0
