"""``JobState.copy``: the pass's copy of a record before it changes it (``decide/lifecycle.py``).
Every field equal, every container the pass may change a new one, the previous record untouched
whatever the copy's changes (an unchanged job is carried over as the very same object)."""

from __future__ import annotations

from controller.model.records import JOB_FIELDS, JobState

MUTABLE = ("labels", "devices", "device_uuids", "cores", "usage", "conditions")


def _full_record() -> JobState:
    record = JobState(name="train", created=1.0)
    for number, name in enumerate(JOB_FIELDS):  # a distinct value in every plain field
        if name not in MUTABLE and name != "name" and getattr(record, name) in (None, 0, "", 0.0, False):
            setattr(record, name, f"v{number}" if isinstance(getattr(record, name), str) else number + 1)
    record.labels, record.usage = {"team": "vision"}, {"cpuUsec": 5}
    record.devices, record.device_uuids, record.cores = [1, 3], ["GPU-a", "GPU-b"], [4, 5]
    record.conditions = [{"type": "Admitted", "status": "True", "reason": "Valid"}]
    return record


def test_a_copy_has_every_field_and_changes_to_it_never_reach_the_original():
    old = _full_record()
    before = {name: repr(getattr(old, name)) for name in JOB_FIELDS}
    new = old.copy()
    assert {name: repr(getattr(new, name)) for name in JOB_FIELDS} == before
    for name in MUTABLE:
        assert getattr(new, name) is not getattr(old, name)
    assert all(c is not o for c, o in zip(new.conditions, old.conditions))
    new.labels["x"] = "y"
    new.devices.append(7)
    new.device_uuids.append("GPU-c")
    new.cores.append(6)
    new.usage["memoryPeak"] = 1
    new.conditions[0]["status"] = "False"
    new.phase, new.message = "Running", "changed"
    assert {name: repr(getattr(old, name)) for name in JOB_FIELDS} == before
