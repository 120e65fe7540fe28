"""The Python client's submitit pattern against a real gflowd: a ``Checkpointable`` function job
is signalled when suspended, its ``checkpoint`` returns the resubmission (the object as it is then),
the runner confirms it, and the resumed attempt continues from there (docs/python-client.md)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from helpers import wait_for, wait_phase

from controller.client import Checkpointable, Client


@pytest.fixture
def proj(tmp_path: Path, monkeypatch) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return folder


def test_a_checkpointable_function_resumes_from_the_state_its_checkpoint_returned(home, gflowd, proj, fake_gpus):
    gflowd("--fake-gpus", fake_gpus)
    client = Client(home)
    marker = proj / "step"

    class Counter(Checkpointable):  # defined here: cloudpickle sends it by value
        def __init__(self):
            self.step = 0
            self.starts: list[tuple[str, int, str | None]] = []

        def __call__(self, marker: str, go: str):
            self.starts.append((os.environ["GFLOW_ATTEMPT"], self.step, os.environ.get("GFLOW_RESUME")))
            while self.step < 5 or not os.path.exists(go):
                self.step += 1
                Path(marker).write_text(str(self.step))
                time.sleep(0.05)
            return self.starts

    future = client.submit_function(Counter(), str(marker), str(proj / "go"), gpus=1)
    wait_for(lambda: marker.exists() and int(marker.read_text() or 0) >= 3, timeout=60)
    client.suspend(future.job)
    status = wait_phase(home, future.job, "Pending", reason="Suspended")
    assert any(c["type"] == "Checkpointed" for c in status["conditions"]), status
    (proj / "go").touch()
    client.resume(future.job)
    starts = future.result(timeout=120)
    assert [(attempt, resume) for attempt, _, resume in starts] == [("1", None), ("2", "1")], starts
    assert starts[1][1] >= 3, starts  # the second attempt began where the checkpoint left the count
