"""Reservations: GPUs held for some users during a window (``kind: Reservation``). Pure.

Each pass, :func:`reservation_statuses` resolves every admitted Reservation into a record: its
window (``+1h`` counts from when the controller first saw it), its GPUs, and its phase. Reservations
are judged in the order they came (those already accepted keep their GPUs, then the oldest); one
that asks for more GPUs than the machine has, a GPU it lacks or an unknown user is Rejected/
``Unsatisfiable``, one whose GPUs are reserved by another in an overlapping window is Rejected/
``Overlap``, each with the numbers. ``gpus: N`` takes the lowest-indexed GPUs not reserved by an
overlapping reservation, chosen once (kept in the status while the spec stays the same), so
``get gpus`` and the waiting jobs' messages name the GPUs before the window opens.

The queue then fences each pending job off the GPUs it may not use (:func:`fence`):
- inside the window, only the listed users' jobs may use the reserved GPUs;
- before it, anyone else's job may use them only when its ``timeLimit`` ends it by the window's
  start (a job without a timeLimit may not, however far off the window is: nothing would end it);
- after it, the reservation is ``Expired``: kept like a finished job, blocking nothing;
- a window that opens further ahead than config.yaml's ``reservations.horizon`` fences nothing yet.
A non-admin's reservation beyond config.yaml's ``reservations`` bounds (who may reserve, for whom,
how many GPUs, how long, how far ahead) is Rejected/``Forbidden``, naming every bound it breaks.
A fenced job that would otherwise fit waits with reason ``Reserved``. Running jobs are never
stopped by a reservation. Wake-ups at each window's start and end re-run the queue then.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING

from controller.api.units import format_duration
from controller.decide.limits import reservation_violations
from controller.decide.policy import user_of
from controller.model.documents import AdmittedReservation
from controller.model.plan import Event, Host, PlanDraft, Snapshot
from controller.model.reasons import EventType, Reason, ReservationPhase, ReservationReason
from controller.model.records import ReservationState
from controller.model.scheduling import Request

if TYPE_CHECKING:  # the schema, for annotations only
    from controller.api.reservation import ReservationSpec

LIVE_PHASES = (ReservationPhase.Pending, ReservationPhase.Active)


@dataclass(frozen=True)
class Window:
    """An accepted, unexpired reservation as the queue sees it."""

    name: str
    users: tuple[str, ...]
    devices: tuple[int, ...]
    start: float
    end: float


def window_text(start: float | None, end: float | None, tz: tzinfo, now: float) -> str:
    """``14:00-16:00`` in local time; dates are added when a time is not on ``now``'s day."""
    if start is None or end is None:
        return ""
    today = datetime.fromtimestamp(now, tz).date()
    first, last = datetime.fromtimestamp(start, tz), datetime.fromtimestamp(end, tz)
    head = first.strftime("%H:%M") if first.date() == today else first.strftime("%Y-%m-%d %H:%M")
    tail = last.strftime("%H:%M") if last.date() == first.date() else last.strftime("%Y-%m-%d %H:%M")
    return f"{head}-{tail}"


def gpus_text(devices: Iterable[int]) -> str:
    listed = list(devices)
    return f"GPU{'s' if len(listed) != 1 else ''} {','.join(map(str, listed))}"


def windows(records: Iterable[ReservationState]) -> list[Window]:
    """The reservations that still hold GPUs (accepted, not expired)."""
    return [
        Window(r.name, tuple(r.users), tuple(r.devices), r.start, r.end)
        for r in records
        if r.phase in LIVE_PHASES and r.start is not None and r.end is not None
    ]


# -- the records --------------------------------------------------------------------------------


def reservation_statuses(plan: PlanDraft, snap: Snapshot, now: float) -> None:
    """Every admitted Reservation's record into ``plan.reservations``; deleted ones are removed;
    expired ones past the TTL or beyond the history are handed to prune, as finished jobs are."""
    admitted = snap.admitted.reservations
    olds = snap.reservation_states
    horizon = _horizon(snap)
    order = sorted(
        admitted.values(),
        key=lambda r: (not _kept(olds.get(r.name), r), _created(olds.get(r.name), now), r.mtime_ns, r.name),
    )
    accepted: list[ReservationState] = []
    for reservation in order:
        state = _resolve(reservation, olds.get(reservation.name), snap, accepted, now)
        if state.phase in LIVE_PHASES:
            assert state.start is not None and state.end is not None  # a live reservation has its window
            accepted.append(state)
            plan.wake(state.start if state.phase == ReservationPhase.Pending else state.end)
            if state.start - horizon > now:  # it starts fencing jobs then
                plan.wake(state.start - horizon)
        plan.reservations[state.name] = state
        old = olds.get(state.name)
        if old is None or (old.phase, old.reason) != (state.phase, state.reason):
            kind = EventType.Warning if state.phase == ReservationPhase.Rejected else EventType.Normal
            plan.events.append(Event(kind, state.reason, state.name, state.message, kind="reservation"))
    for name in olds:
        if name not in admitted:
            plan.removed_reservations.append(name)
            plan.events.append(
                Event(EventType.Normal, Reason.Deleted, name, "manifest deleted; its GPUs are free", kind="reservation")
            )
    _expire(plan, snap, now)


def _horizon(snap: Snapshot) -> float:
    """How far ahead a window fences jobs (config.yaml's ``reservations.horizon``; unbounded without one)."""
    return snap.policy.reservations.horizon if snap.policy.reservations is not None else math.inf


def _kept(old: ReservationState | None, reservation: AdmittedReservation) -> bool:
    """Accepted before with this very spec: it keeps its GPUs against newcomers."""
    return old is not None and old.spec_hash == reservation.spec_hash and old.phase != ReservationPhase.Rejected


def _created(old: ReservationState | None, now: float) -> float:
    return old.created if old is not None else now


def _resolve(
    reservation: AdmittedReservation,
    old: ReservationState | None,
    snap: Snapshot,
    accepted: list[ReservationState],
    now: float,
) -> ReservationState:
    spec, tz = reservation.spec, snap.host.local_tz
    created = _created(old, now)
    start = _start_time(spec.start, created, tz)
    end = start + spec.duration
    state = ReservationState(
        name=reservation.name,
        created=created,
        manifest=reservation.source,
        spec_hash=reservation.spec_hash,
        labels=dict(reservation.reservation.metadata.labels),
        users=list(spec.users),
        start=start,
        end=end,
        generation=(old.generation if old else 0) + (old is None or old.spec_hash != reservation.spec_hash),
    )
    when = window_text(state.start, state.end, tz, now)
    if now >= end:
        state.devices = list(spec.devices or (old.devices if old is not None and _kept(old, reservation) else []))
        state.phase, state.reason, state.completion_time = (
            ReservationPhase.Expired,
            ReservationReason.WindowClosed,
            state.end,
        )
        state.message = f"window {when} ended"
        return state
    owner = user_of(reservation.owner_uid, snap.host.user_names)
    forbidden = reservation_violations(
        snap.policy,
        owner,
        reservation.owner_uid,
        list(spec.users),
        spec.gpus or len(spec.devices or ()),
        start,
        spec.duration,
        now,
    )
    if forbidden:
        return _reject(state, ReservationReason.Forbidden, f"{'; '.join(forbidden)} ({reservation.source})")
    problem = _unsatisfiable(spec, snap)
    if problem is not None:
        return _reject(state, ReservationReason.Unsatisfiable, f"{problem} ({reservation.source})")
    overlapping = [a for a in accepted if a.start is not None and a.end is not None and a.start < end and start < a.end]
    devices, clash = _devices(spec, old if _kept(old, reservation) else None, overlapping, snap, tz, now, when)
    if devices is None:
        return _reject(state, ReservationReason.Overlap, f"{clash} ({reservation.source})")
    state.devices = devices
    # no countdown in the message: the record (and its status file) changes only when something does
    state.message = f"{gpus_text(devices)} reserved for {', '.join(spec.users)} {when}"
    if now < start:
        state.phase, state.reason = ReservationPhase.Pending, ReservationReason.Upcoming
    else:
        state.phase, state.reason = ReservationPhase.Active, ReservationReason.WindowOpen
    return state


def _reject(state: ReservationState, reason: str, message: str) -> ReservationState:
    state.phase, state.reason, state.message = ReservationPhase.Rejected, reason, message
    return state


def _start_time(value: str, created: float, tz: tzinfo) -> float:
    """``spec.start``: ``+1h`` from when the controller first saw it; a time without an offset is local."""
    # lazy: gates pulls in the queue's modules; get reservations does not need them
    from controller.decide.gates import start_after_time

    return start_after_time(value, created, tz) or created


def _unsatisfiable(spec: ReservationSpec, snap: Snapshot) -> str | None:
    """Why the machine can never give this reservation what it asks, with the numbers; or None."""
    allowed = snap.allowed_gpus
    usable = [g.index for g in snap.gpus if allowed is None or g.index in allowed]
    problems = []
    if spec.devices is not None:
        missing = [d for d in spec.devices if d not in usable]
        if missing:
            have = f"GPUs {','.join(map(str, usable))}" if usable else "no GPUs"
            problems.append(f"spec.devices: {gpus_text(missing)} not on this machine (it has {have} to reserve)")
    elif (spec.gpus or 0) > len(usable):  # a model validator makes it one of gpus, devices
        problems.append(f"spec.gpus: reserves {spec.gpus} GPUs, this machine has {len(usable)}")
    unknown = [u for u in spec.users if snap.host.user_ids.get(u, 0) is None]
    if unknown:
        problems.append(f"spec.users: no such user {', '.join(unknown)}")
    return "; ".join(problems) or None


def _devices(
    spec: ReservationSpec,
    old: ReservationState | None,
    overlapping: list[ReservationState],
    snap: Snapshot,
    tz: tzinfo,
    now: float,
    when: str,
) -> tuple[list[int] | None, str]:
    """The GPUs it holds, or None and why (an overlap, with the numbers)."""
    taken = {d: other for other in overlapping for d in other.devices}
    if spec.devices is not None:
        clashes = [d for d in spec.devices if d in taken]
        if not clashes:
            return list(spec.devices), ""
        other = taken[clashes[0]]
        return None, (
            f"spec.devices: {gpus_text(clashes)} reserved by {other.name} for {', '.join(other.users)} "
            f"{window_text(other.start, other.end, tz, now)}, overlapping this window {when}"
        )
    allowed = snap.allowed_gpus
    free = [g.index for g in snap.gpus if (allowed is None or g.index in allowed) and g.index not in taken]
    if old is not None and len(old.devices) == spec.gpus and all(d in free for d in old.devices):
        return list(old.devices), ""
    if len(free) >= (spec.gpus or 0):  # (gpus is set when devices is not)
        return sorted(free)[: spec.gpus], ""
    holders = ", ".join(
        f"{gpus_text(o.devices)} by {o.name} {window_text(o.start, o.end, tz, now)}" for o in overlapping
    )
    return None, f"spec.gpus: reserves {spec.gpus} GPUs {when}, {len(free)} not reserved by others then ({holders})"


def _expire(plan: PlanDraft, snap: Snapshot, now: float) -> None:
    """Expired reservations go as finished jobs do: ``ttlSecondsAfterFinished`` after their end, and
    the oldest beyond ``finishedJobsHistory`` (counted among reservations)."""
    if snap.default_ttl is None and snap.finished_history is None:
        return
    ended = sorted(
        (r.completion_time or now, name) for name, r in plan.reservations.items() if r.phase == ReservationPhase.Expired
    )
    gone: list[str] = []
    for done_at, name in ended:
        if snap.default_ttl is not None and now >= done_at + snap.default_ttl:
            gone.append(name)
        elif snap.default_ttl is not None:
            plan.wake(done_at + snap.default_ttl)
    if snap.finished_history is not None and len(ended) > snap.finished_history:
        gone.extend(name for _, name in ended[: len(ended) - snap.finished_history] if name not in gone)
    for name in gone:
        reservation = snap.admitted.reservations[name]
        plan.expired.append(reservation)
        plan.events.append(
            Event(
                EventType.Normal,
                Reason.Expired,
                name,
                f"expired reservation removed: its manifest {reservation.source} is deleted",
                kind="reservation",
            )
        )


# -- the queue ------------------------------------------------------------------------------------


def fence(
    req: Request,
    user: str | None,
    uid: int,
    live: list[Window],
    host: Host,
    now: float,
    horizon: float = math.inf,
) -> Request:
    """``req`` with the GPUs it may not use now (``fenced``) and why (``fenced_why``), see the module
    docstring. ``user``: the job owner's name, ``uid`` its uid (either may identify a listed user).
    A window that opens more than ``horizon`` from now fences nothing yet."""
    fenced: set[int] = set()
    preferred: set[int] = set()
    why: list[str] = []
    for window in live:
        if now >= window.end or window.start - now > horizon:
            continue
        if _listed(window, user, uid, host) or (
            now < window.start and req.time_limit is not None and now + req.time_limit <= window.start
        ):  # its users' job, or one that ends before the window opens (backfill into the gap)
            preferred.update(window.devices)
            continue
        fenced.update(window.devices)
        text = f"{gpus_text(window.devices)} reserved for {', '.join(window.users)} {window_text(window.start, window.end, host.local_tz, now)}"
        if now < window.start:
            text += f" (with a timeLimit of at most {format_duration(window.start - now)} it could use them now)"
        why.append(text)
    if not fenced and not preferred:
        return req
    return replace(req, fenced=frozenset(fenced), fenced_why="; ".join(why), preferred=frozenset(preferred - fenced))


def _listed(window: Window, user: str | None, uid: int, host: Host) -> bool:
    if user is not None and user in window.users:
        return True
    return any(host.user_ids.get(name) == uid for name in window.users) and uid >= 0


def fence_queue(
    requests: list[Request], owners: list[int], plan: PlanDraft, snap: Snapshot, now: float
) -> list[Request]:
    """The queue's requests fenced by the live reservations (``owners``: each job's manifest uid)."""
    live = windows(plan.reservations.values())
    if not live:
        return requests
    names, horizon = snap.host.user_names, _horizon(snap)
    return [
        fence(req, names.get(uid), uid, live, snap.host, now, horizon) if req.gpus else req
        for req, uid in zip(requests, owners)
    ]


def next_boundary(live: list[Window], now: float) -> float:
    """The next window start or end after ``now`` (the simulator's next event); inf when none."""
    return min((t for w in live for t in (w.start, w.end) if t > now), default=math.inf)
