"""Host facts are read at the edge (observe/host.py) and handed to decide as data: the local time
zone, user names, conda, gflowd's uid; and the recorder stamps the index with the injected clock."""

from __future__ import annotations

import json
import os
import pwd
import time
from dataclasses import replace
from datetime import datetime

import pytest
from builders import documents, job

from controller.observe.host import HostFacts, LocalTime
from controller.paths import Home
from controller.record.recorder import Recorder


@pytest.fixture
def zone(monkeypatch):
    """Set the process time zone (TZ) for one test; tzset again afterwards."""

    def set_zone(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("name", ["Europe/Berlin", "America/New_York", "UTC", "Asia/Kolkata"])
@pytest.mark.parametrize(
    "wall",
    [
        datetime(2030, 1, 1, 0, 0),
        datetime(2030, 7, 1, 12, 30, 15, 250_000),
        datetime(2030, 3, 31, 1, 59, 59),  # Berlin: just before the spring-forward gap
        datetime(2030, 3, 31, 3, 0),  # ...and just after it
        datetime(2030, 11, 3, 1, 30),  # New York: a wall time that happens twice (fold 0)
        datetime(2030, 10, 27, 2, 30),  # Berlin: the same
    ],
)
def test_local_time_reads_a_wall_clock_as_the_machine_does(zone, name, wall):
    zone(name)
    assert wall.replace(tzinfo=LocalTime()).timestamp() == pytest.approx(wall.astimezone().timestamp(), abs=1e-6)


@pytest.mark.parametrize("name", ["Europe/Berlin", "America/New_York", "UTC"])
@pytest.mark.parametrize("moment", [1_900_000_000.0, 1_911_000_000.0, 1_919_900_000.0])  # winter, summer, a DST night
def test_local_time_converts_a_moment_to_the_wall_clock_as_the_machine_does(zone, name, moment):
    zone(name)
    local = datetime.fromtimestamp(moment, LocalTime())  # what a Reservation's window text needs
    assert local.replace(tzinfo=None) == datetime.fromtimestamp(moment)
    assert local.timestamp() == pytest.approx(moment, abs=1e-6)


def test_reservation_users_are_looked_up_and_unknown_ones_again_on_a_resync():
    (doc,) = documents(
        "kind: Reservation\nmetadata: {name: r}\nspec:\n  users: [root, no-such-user-res]\n  gpus: 1\n"
        "  start: '+1h'\n  duration: 1h\n",
        stem="r",
    )
    host = HostFacts()
    assert host.read(False, [doc]).user_ids == {"root": 0, "no-such-user-res": None}
    assert host.read(True, []).user_ids == {"root": 0}  # a resync forgets the misses: the user may exist now


def test_user_names_are_looked_up_once_and_only_when_quotas_name_users(monkeypatch):
    me = os.getuid()
    docs = [replace(job("a"), owner_uid=me), replace(job("b"), owner_uid=me), job("c")]  # c: owner unknown (-1)
    calls = []
    real = pwd.getpwuid
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: calls.append(uid) or real(uid))
    assert HostFacts(want_user_names=False).read(True, docs).user_names == {}
    host = HostFacts(want_user_names=True)
    assert host.read(True, docs).user_names == {me: real(me).pw_name}
    host.read(True, docs)
    assert calls == [me]  # once per uid, for the process's life (as the lru_cache it replaces)


def test_conda_is_looked_up_on_a_resync_only(monkeypatch, tmp_path):
    host = HostFacts()
    monkeypatch.setenv("PATH", str(tmp_path))
    assert host.read(True, []).conda_available is False
    conda = tmp_path / "conda"
    conda.write_text("#!/bin/sh\n")
    conda.chmod(0o755)
    assert host.read(False, []).conda_available is False  # a pass between resyncs keeps what it knew
    assert host.read(True, []).conda_available is True
    assert host.read(False, []).controller_uid == os.geteuid()


def test_the_index_is_stamped_with_the_injected_clock(tmp_path):
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    recorder = Recorder(home, clock=lambda: 1_234.5)
    recorder.write_index({"pid": 1})
    assert json.loads(home.index_file.read_text())["updated"] == 1_234.5
