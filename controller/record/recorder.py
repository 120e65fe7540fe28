"""Record: the one writer of everything under the state directory.

Status files are written atomically and only when the job's record changed; the index (one JSON
summary for fast ``gflowctl get jobs``), ``node.yaml`` and ``events.jsonl`` are kept here too.
Nothing here decides anything.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Callable, Iterable

from controller import API_VERSION
from controller.api.units import format_cpu_list as format_cores
from controller.api.units import format_quantity
from controller.model.plan import Event
from controller.model.records import JobState, ReservationState, SweepState, rfc3339
from controller.model.scheduling import CorePool, GpuSlot
from controller.paths import Home
from controller.util.fsutil import atomic_write, fsync_dir
from controller.util.jsonlog import append_lines
from controller.util.yamlio import YAMLSyntaxError, dump, load_one, load_own

log = logging.getLogger("gflowd.recorder")
EVENTS_MAX_BYTES = 10 * 1024 * 1024


def _process_entry(process) -> dict:
    entry = {"pid": process.pid, "usedMemory": format_quantity(process.used_memory) or "0"}
    if process.utilization is not None:
        entry["utilization"] = process.utilization
    return entry


def _index_row(name: str, state: JobState) -> bytes:
    return f"{json.dumps(name)}:{json.dumps(state.summary(), separators=(',', ':'))}".encode()


def status_json(source: os.stat_result, document: dict) -> bytes:
    """A status document as ``gflowctl get -o json`` prints it, after a first line naming the status
    file it copies by inode, mtime and size: a copy that no longer matches its file (gflowd died
    between the two writes) is not used."""
    head = json.dumps({"source": [source.st_ino, source.st_mtime_ns, source.st_size]})
    return f"{head}\n{json.dumps(document, indent=2)}\n".encode()


class Recorder:
    def __init__(self, home: Home, clock: Callable[[], float] = time.time):
        self.home = home
        self.clock = clock  # the index's "updated": gflowd's injected clock, as every timestamp
        self.written: dict[str, JobState] = {}
        self.written_sweeps: dict[str, SweepState] = {}
        self.written_reservations: dict[str, ReservationState] = {}
        self._rows: dict[str, bytes] = {}  # name -> the job's index entry as JSON, b'"name":{...}'
        self._order: list[str] | None = None  # names sorted, kept until the set of names changes
        self._node_text = ""
        self.status_writes = 0

    def load(self) -> tuple[dict[str, JobState], dict[str, SweepState], dict[str, ReservationState]]:
        """Rebuild the controller's memory from status files (at start-up)."""
        states: dict[str, JobState] = {}
        sweeps: dict[str, SweepState] = {}
        reservations: dict[str, ReservationState] = {}
        for path in self.home.status_dir.glob("*.yaml"):
            try:
                text = path.read_text()
                try:
                    data = load_own(text)  # our own subset of YAML: ~6x faster than the real loader
                except ValueError:
                    data = load_one(text)
                if isinstance(data, dict) and data.get("kind") == "SweepStatus":
                    sweep = SweepState.from_status(data)
                    if sweep.name == path.stem:
                        sweeps[sweep.name] = sweep
                        self.written_sweeps[sweep.name] = sweep
                    continue
                if isinstance(data, dict) and data.get("kind") == "ReservationStatus":
                    reservation = ReservationState.from_status(data)
                    if reservation.name == path.stem:
                        reservations[reservation.name] = self.written_reservations[reservation.name] = reservation
                    continue
                state = JobState.from_status(data)
            except (OSError, YAMLSyntaxError, KeyError, TypeError, ValueError, AttributeError) as exc:
                log.warning("ignoring unreadable status file %s: %s", path, exc)
                continue
            if state.name != path.stem:
                continue
            states[state.name] = state
            self.written[state.name] = state
        return states, sweeps, reservations

    def write_sweeps(self, sweeps: dict[str, SweepState], removed: Iterable[str]) -> bool:
        return self._write_records(self.written_sweeps, sweeps, removed)

    def write_reservations(self, reservations: dict[str, ReservationState], removed: Iterable[str]) -> bool:
        return self._write_records(self.written_reservations, reservations, removed)

    def _write_records(self, written: dict, records: dict, removed: Iterable[str]) -> bool:
        """Status files of Sweeps or Reservations (``written``: as on disk) that changed; removed ones go."""
        changed = False
        for name in removed:
            written.pop(name, None)
            if name not in self.written:  # the name may have passed to a job meanwhile
                self._remove_status(name)
            changed = True
        for name, record in records.items():
            if written.get(name) == record:
                continue
            document = record.to_status()
            atomic_write(self.home.status_file(name), dump(document))
            self._write_json(name, document)
            written[name] = record
            changed = True
        return changed

    def write_states(
        self, states: dict[str, JobState], removed: Iterable[str], only: Iterable[str] | None = None
    ) -> bool:
        """Write the status files that changed and remove the given ones. True when anything did.
        ``only``: the names that may have changed (the pass carried every other record over as the
        very object written before); None: compare them all."""
        changed = False
        for name in removed:
            self.written.pop(name, None)
            self._rows.pop(name, None)
            self._order = None
            self._remove_status(name)
            changed = True
        pairs = states.items() if only is None else [(n, states[n]) for n in only if n in states]
        for name, state in pairs:
            known = self.written.get(name)
            if known is state:  # identity first: unchanged records are shared between passes
                continue
            if known == state:
                self.written[name] = state  # same content: keep this object, so next time `is` holds
                continue
            # A job that never started has nothing to lose: its manifest recreates it. Every other
            # record (a start decided, an exit recorded) must reach the disk before it is relied on.
            durable = state.attempt > 0 or state.phase != "Pending"
            document = state.to_status()
            atomic_write(self.home.status_file(name), dump(document), durable=durable, sync_dir=False)
            self._write_json(name, document)
            if known is None:
                self._order = None
            self.written[name] = state  # the controller never mutates a recorded state again
            self._rows[name] = _index_row(name, state)
            self.status_writes += 1
            changed = True
        if changed:
            fsync_dir(self.home.status_dir)  # one folder fsync for every rename of this pass
        return changed

    def _write_json(self, name: str, document: dict) -> None:
        """The JSON copy of a status file just written (run/status-json/): ``get jobs -o json``
        prints these instead of parsing every status file (2k jobs: ~0.1 s instead of ~1.5 s). A
        cache: failing to write it costs a slower ``-o json``, never the pass."""
        target = self.home.status_json_file(name)
        try:
            source = os.stat(self.home.status_file(name))
            try:
                atomic_write(target, status_json(source, document), durable=False)
            except FileNotFoundError:
                target.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(target, status_json(source, document), durable=False)
        except OSError as exc:
            log.debug("no JSON copy of status/%s.yaml: %s", name, exc)
            self._remove_json(name)

    def _remove_status(self, name: str) -> None:
        """The status file and its JSON copy (``get -o json`` reads the copy)."""
        try:
            self.home.status_file(name).unlink()
        except FileNotFoundError:
            pass
        self._remove_json(name)

    def _remove_json(self, name: str) -> None:
        try:
            self.home.status_json_file(name).unlink()
        except OSError:
            pass

    def write_index(self, controller_info: dict) -> None:
        """``run/index.json``: every job's summary row, for ``gflowctl get jobs``. A cache of the
        status files (written without fsync: losing it in a crash costs nothing). Rows are kept as
        JSON text per job, so a rewrite costs a join, not a serialisation of every job."""
        if len(self._rows) != len(self.written):  # after load(): rows of the states read back
            for name, state in self.written.items():
                if name not in self._rows:
                    self._rows[name] = _index_row(name, state)
        if self._order is None or len(self._order) != len(self.written):
            self._order = sorted(self.written)
        head = json.dumps(
            {"apiVersion": API_VERSION, "kind": "JobIndex", "updated": self.clock(), "controller": controller_info},
            separators=(",", ":"),
        )[:-1]
        rows = self._rows
        jobs = b",".join([rows[name] for name in self._order])
        sweeps = json.dumps({n: s.summary() for n, s in sorted(self.written_sweeps.items())}, separators=(",", ":"))
        reservations = json.dumps({n: r.summary() for n, r in sorted(self.written_reservations.items())}, separators=(",", ":"))
        payload = b"".join([
            head.encode(), b',"jobs":{', jobs, b'},"sweeps":', sweeps.encode(), b',"reservations":', reservations.encode(), b"}",
        ])
        atomic_write(self.home.index_file, payload, durable=False)

    def write_node(self, slots: list[GpuSlot], source: str, cores: CorePool | None = None, limits: str | None = None) -> None:
        gpus = []
        for slot in slots:
            gpu = slot.gpu
            entry = {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "name": gpu.name,
                "memory": format_quantity(gpu.memory_total),
                "memoryBytes": gpu.memory_total,  # exact, for tools comparing with nvidia-smi
                "memoryUsed": format_quantity(gpu.memory_used) or "0",
                "utilization": gpu.utilization,
                "state": slot.state,
                "jobs": list(slot.jobs),
            }
            if gpu.processes:
                entry["processes"] = [_process_entry(p) for p in gpu.processes]
            if gpu.error:
                entry["error"] = gpu.error
            gpus.append({k: v for k, v in entry.items() if v is not None})
        data: dict = {"apiVersion": API_VERSION, "kind": "Node", "inventory": source, "gpus": gpus}
        if cores is not None:  # the CPU cores booked by resources.cpus
            data["cpus"] = {
                "total": len(cores.cores), "free": len(cores.cores) - len(cores.taken), "cores": format_cores(sorted(cores.cores)),
                "jobs": {name: format_cores(sorted(c for c, n in cores.taken.items() if n == name)) for name in sorted(set(cores.taken.values()))},
            }
        if limits:
            data["limits"] = limits  # what the kernel enforces (cgroups), or why nothing is
        text = dump(data)
        if text != self._node_text:
            atomic_write(self.home.node_file, text)
            self._node_text = text

    def write_gpu_usage(self, text: str) -> None:
        """Running attempts' GPU usage samples (``observe.gpu_usage``): statistics, so no fsync; the
        atomic rename still means a reader (gflowctl top) never sees half of it."""
        atomic_write(self.home.gpu_usage_file, text, durable=False)

    def events(self, events: Iterable[Event], now: float) -> None:
        lines = []
        for event in events:
            record = {
                "time": rfc3339(now),
                "type": event.type,
                "reason": event.reason,
                "object": f"{event.kind}/{event.object}" if event.object else "",
                "message": event.message,
            }
            lines.append(json.dumps(record, ensure_ascii=False) + "\n")
            level = logging.WARNING if event.type == "Warning" else logging.INFO
            log.log(level, "%s %s: %s", record["object"] or "-", event.reason, event.message)
        # one O_APPEND write: each event line lands whole, even with concurrent readers
        append_lines(self.home.events_file, lines, EVENTS_MAX_BYTES)
