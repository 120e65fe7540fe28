"""gflowd's at-once pass waits for the rest of the files one review let a caller store once the
first has landed (``daemon/landings.py``): one pass for an ``apply -f DIR``, not one for its first
file and a debounced one for the others. Pure timing data, an injected clock; then end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers import ctl, wait_phase

from controller.daemon.landings import TTL, WAIT, Landings


def paths(folder: Path, *names: str) -> list[str]:
    return [str(folder / f"{name}.yaml") for name in names]


def test_the_first_file_of_a_batch_waits_for_the_rest_until_all_have_landed(tmp_path):
    landings = Landings()
    a, b, c = paths(tmp_path, "a", "b", "c")
    landings.expect([a, b, c], now=100.0)
    assert landings.wait_until(100.0) is None  # nothing landed yet: nothing to wait for
    landings.landed([a, str(tmp_path / ".a.yaml.0123456789ab.tmp")], now=101.0)
    assert landings.wait_until(101.0) == 101.0 + WAIT
    landings.landed([b], now=101.001)
    assert landings.wait_until(101.001) == 101.0 + WAIT  # from the first file, not the last
    landings.landed([c], now=101.002)
    assert landings.wait_until(101.002) is None


def test_a_batch_that_lands_in_part_is_waited_for_at_most_wait(tmp_path):
    landings = Landings()
    a, b = paths(tmp_path, "a", "b")
    landings.expect([a, b], now=0.0)
    landings.landed([a], now=5.0)
    assert landings.wait_until(5.0 + WAIT / 2) == 5.0 + WAIT
    assert landings.wait_until(5.0 + WAIT) is None
    landings.landed([b], now=6.0)  # late: passed on as any change
    assert landings.wait_until(6.0) is None


def test_a_batch_never_landing_is_forgotten_and_lone_or_existing_files_make_none(tmp_path):
    landings = Landings()
    landings.expect(paths(tmp_path, "dry", "run"), now=0.0)  # a --dry-run: nothing lands
    assert landings.wait_until(TTL) is None
    landings.landed(paths(tmp_path, "dry"), now=TTL + 1)
    assert landings.wait_until(TTL + 1) is None
    landings.expect(paths(tmp_path, "lone"), now=0.0)  # run, apply -f FILE
    landings.landed(paths(tmp_path, "lone"), now=1.0)
    assert landings.wait_until(1.0) is None
    (tmp_path / "old.yaml").write_text("kind: Job\n")  # applied again: rewritten in place, or unchanged
    landings.expect(paths(tmp_path, "old", "new"), now=2.0)
    landings.landed(paths(tmp_path, "new"), now=3.0)
    assert landings.wait_until(3.0) is None


def test_a_folder_applied_is_started_in_one_pass(home, gflowd, tmp_path):
    """Real gflowctl and gflowd: every job of ``apply -f DIR`` was admitted by one pass (their
    status creationTimestamp is that pass's clock), not the first file alone and then the rest."""
    daemon = gflowd()
    src = tmp_path / "burst"
    src.mkdir()
    names = [f"b{i}" for i in range(4)]
    for name in names:
        (src / f"{name}.yaml").write_text(f"kind: Job\nmetadata:\n  name: {name}\nspec:\n  command: ['true']\n")
    out = ctl(home, "apply", "-f", str(src))
    assert out.stdout == "".join(f"job/{name} created\n" for name in names), out.stderr
    for name in names:
        wait_phase(home, name, "Succeeded", daemon=daemon)
    created = {
        re.search(r"creationTimestamp: (.*)", (home / "status" / f"{name}.yaml").read_text()).group(1)  # type: ignore[union-attr]
        for name in names
    }
    started = [json.loads(line) for line in (home / "events.jsonl").read_text().splitlines()]
    assert len(created) == 1, (created, [e for e in started if e["reason"] == "Started"])
