"""Facts about the machine that decide needs and must not ask for itself: gflowd's uid, whether
conda is on its PATH, the user names of manifest owners (for quotas), the local time zone, the CPU
cores jobs may be pinned to.

Observes only. Each fact is read here, at the edge, and handed to decide in the snapshot
(``model.plan.Host``), so the same snapshot always decides the same thing.
"""

from __future__ import annotations

import os
import pwd
import shutil
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, tzinfo

from controller.model.plan import Host


class LocalTime(tzinfo):
    """The machine's local time as the C library reads it (``TZ``, ``/etc/localtime``), daylight
    saving included: ``naive.replace(tzinfo=LocalTime()).timestamp()`` equals
    ``naive.astimezone().timestamp()``, but decide gets it as data instead of asking the process."""

    def utcoffset(self, dt: datetime | None) -> timedelta:
        if dt is None:
            dt = datetime.now()
        wall = dt.replace(tzinfo=None, microsecond=0)
        return wall - datetime.fromtimestamp(wall.timestamp(), UTC).replace(tzinfo=None)

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def fromutc(self, dt: datetime) -> datetime:
        """UTC -> local wall time, as the C library converts it (what ``datetime.fromtimestamp(ts, tz)``
        and ``astimezone`` call; the default needs ``dst()``, which this zone does not split out)."""
        moment = dt.replace(tzinfo=UTC).timestamp()
        return datetime.fromtimestamp(moment).replace(tzinfo=self, fold=0)

    def tzname(self, dt: datetime | None) -> str:
        return time.strftime(
            "%Z", time.localtime(datetime.now().timestamp() if dt is None else dt.replace(tzinfo=None).timestamp())
        )

    def __repr__(self) -> str:
        return "LocalTime()"


def user_id(name: str) -> int | None:
    """The uid of a user name, or None when the system has no such user."""
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def user_name(uid: int) -> str | None:
    """The name of a uid, or None when the system has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def machine_capacity(shm: str = "/dev/shm") -> dict[str, int]:
    """The machine's amount of each counted kind (``controller.model.resources.COUNTED``): the size
    of /dev/shm, which every job's shared memory comes out of. Absent: that kind is not booked."""
    try:
        fs = os.statvfs(shm)
    except OSError:
        return {}
    return {"shm": fs.f_blocks * fs.f_frsize} if fs.f_blocks else {}


class HostFacts:
    """Reads the host facts for each pass. conda is looked up on a resync only (a ``which`` per
    pass would cost more than the pass); user names once per uid, and only when quotas or the admin's policy name users."""

    def __init__(self, want_user_names: bool = False) -> None:
        self.controller_uid = os.geteuid()
        # the cores gflowd may run on (a taskset or cpuset around it narrows them): what jobs are pinned to
        self.cores = frozenset(os.sched_getaffinity(0))
        self.capacity = machine_capacity()  # the counted kinds' amounts (resources.shm)
        self.local_tz = LocalTime()
        self._conda: bool | None = None
        self._want_names = want_user_names
        self._names: dict[int, str] = {}
        self._looked_up: set[int] = set()
        self._ids: dict[str, int | None] = {}  # the users Reservations list

    def conda_available(self, refresh: bool = False) -> bool:
        if refresh or self._conda is None:
            self._conda = shutil.which("conda") is not None
        return self._conda

    def read(self, full: bool, owners: Iterable[object]) -> Host:
        """This pass's facts. ``owners``: documents that may bring a new manifest owner (every
        document on a resync, the changed ones otherwise)."""
        if self._want_names:
            for doc in owners:
                uid = getattr(doc, "owner_uid", -1)
                if uid >= 0 and uid not in self._looked_up:
                    self._looked_up.add(uid)
                    name = user_name(uid)
                    if name is not None:
                        self._names[uid] = name
        self._reservation_users(full, owners)
        return Host(
            controller_uid=self.controller_uid,
            conda_available=self.conda_available(refresh=full),
            user_names=self._names,
            local_tz=self.local_tz,
            cores=self.cores,
            capacity=self.capacity,
            user_ids=self._ids,
        )

    def _reservation_users(self, full: bool, documents: Iterable[object]) -> None:
        """The uids of the users Reservations list (jobs are matched by uid); unknown ones are
        looked up again on a resync, so a user created later is found."""
        if full:
            self._ids = {name: uid for name, uid in self._ids.items() if uid is not None}
        for doc in documents:
            reservation = getattr(doc, "reservation", None)
            for name in reservation.spec.users if reservation is not None else ():
                if name not in self._ids:
                    self._ids = {**self._ids, name: user_id(name)}
