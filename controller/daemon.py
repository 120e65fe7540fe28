"""gflowd: the reconcile loop.

Each pass is level-triggered: observe (manifests, processes, GPUs) -> decide (pure
``reconcile``) -> act (start/stop) -> record (status files, events, index, node). A pass runs
after file events (debounced), when a job process ends, when a timer is due, and on every resync
tick. One instance per home, guarded by a lock file.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import gc
import logging
import os
import selectors
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic_core import PydanticUndefined

from controller.paths import Home

log = logging.getLogger("gflowd")
MAX_DEBOUNCE = 0.2
GPU_REFRESH = 2.0
START_BUDGET = 0.25  # seconds of job starts per pass (see Controller._max_starts)...
MIN_STARTS, MAX_STARTS = 32, 4096  # ...within these bounds
INDEX_MIN_GAP = 0.02  # seconds between index rewrites under a flood of passes: at least...
INDEX_MAX_GAP = 1.0  # ...and at most (see Controller._write_index)


def _gpu_facts(gpus) -> tuple:
    return tuple((g.index, g.uuid, g.healthy, g.memory_total, g.processes) for g in gpus)


class AlreadyRunning(Exception):
    pass


class InstanceLock:
    """An flock on ``run/gflowd.lock``: released by the kernel if gflowd dies, so never stale."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AlreadyRunning(holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def is_running(home: Home) -> bool:
    """True when some gflowd holds this home's lock (used by gflowctl to warn about stale state)."""
    from controller.fsutil import lock_held

    return lock_held(home.lock_file)


class Controller:
    def __init__(self, home: Home, config, inventory, runtime=None, clock=time.time, observers=None):
        from controller.recorder import Recorder
        from controller.runtime import make_runtime
        from controller.store import ManifestStore

        self.home = home
        self.config = config
        self.inventory = inventory
        self.clock = clock
        self.store = ManifestStore(home.spec_dir, home.display, home.run_dir / "manifest-cache.json")
        self.recorder = Recorder(home)
        self.runtime = runtime or make_runtime(home, config)
        self.states: dict = {}
        self.sweep_states: dict = {}
        self.gpus: list = []
        self._gpus_read_at = -1e9
        self._dirty: set[str] = set()
        self._gpus_dirty = True
        self._lock = threading.Lock()
        self._first_dirty: float | None = None
        self._last_dirty = 0.0
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stopping = False
        self._warned: set[tuple[str, str, str]] = set()
        self._conda: bool | None = None
        self._previous_admission = None
        self._unsettled: set[str] | None = None  # the last plan's unfinished jobs (see Snapshot)
        self.passes = 0
        self._start_cost: float | None = None  # seconds per job start, a moving average
        self._decide_cost = 0.0  # seconds the last pass took before starting jobs
        self._index_at = -1e9  # monotonic time of the last index write
        self._index_cost = 0.0  # seconds it took
        self._index_due: float | None = None  # a coalesced index write is due then (monotonic)
        self.observers = observers  # controller.observers.Observers: metrics, webhooks, history
        from controller.policy import policy_from_config

        self.policy = policy_from_config(config)  # backfill, aging, fair share, quotas: fixed for this run
        from controller.writeguard import WriteFailures

        self.write_failures = WriteFailures()

    # -- wake-ups from other threads -------------------------------------------------------------

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # the pipe is full: a wake-up is already pending

    def mark_dirty(self, *paths: str) -> None:
        with self._lock:
            now = time.monotonic()
            if self._first_dirty is None:
                self._first_dirty = now
            self._last_dirty = now
            self._dirty.update(paths)
        self.wake()

    def mark_gpus_dirty(self) -> None:
        self._gpus_dirty = True
        self.mark_dirty()

    def request_stop(self, *_args) -> None:
        self._stopping = True
        self.wake()

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        self.states, self.sweep_states = self.recorder.load()
        # The controller holds many long-lived objects (parsed manifests, states); the default GC
        # rescans them all every few thousand allocations. Collect young objects less often; after
        # the first pass, move what start-up loaded out of the collector's way (gc.freeze).
        gc.set_threshold(50_000, 20, 20)
        adopted = self.runtime.adopt()
        if adopted:
            log.info("re-adopted %d running job(s): %s", len(adopted), ", ".join(sorted(adopted)))
        observer = self._watch()
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r, selectors.EVENT_READ)
        registered: set[int] = set()
        next_resync = 0.0
        wake_at: float | None = None
        again = False
        try:
            while not self._stopping:
                mono = time.monotonic()
                full = mono >= next_resync
                due_timer = wake_at is not None and self.clock() >= wake_at
                dirty_ready = self._dirty_ready(mono)
                gpus_changed = self._poll_gpus(mono)
                if again or full or due_timer or dirty_ready or gpus_changed or self._exits_pending():
                    if full:
                        next_resync = mono + self.config.resync
                    try:
                        wake_at, again = self.reconcile_once(full=full)
                    except Exception:  # a bug or the environment failing: say so, keep serving
                        log.exception("reconcile pass failed; a full resync follows in 1s")
                        wake_at, again = None, False
                        next_resync = time.monotonic() + 1.0
                    if again:
                        continue
                if self._index_due is not None and time.monotonic() >= self._index_due:
                    try:
                        self._write_index()
                    except OSError:  # a full disk: the next pass's writes report it and retry
                        self._index_due = time.monotonic() + INDEX_MAX_GAP
                # wait for the next reason to pass
                for fd in set(self.runtime.wait_fds()) - registered:
                    selector.register(fd, selectors.EVENT_READ)
                    registered.add(fd)
                timeout = self._timeout(next_resync, wake_at)
                for key, _ in selector.select(timeout):
                    if key.fd == self._wake_r:
                        try:
                            while os.read(self._wake_r, 4096):
                                pass
                        except BlockingIOError:
                            pass
                    else:  # a job process ended
                        self._exit_seen = True
        finally:
            if observer is not None:
                observer.stop()
            selector.close()
            self.runtime.close()
            try:
                self.store.save_cache()
                if self._index_due is not None:
                    self._write_index(force=True)
            except OSError as exc:  # a full disk must not turn a clean stop into a traceback
                log.warning("could not save the manifest cache or the index while stopping: %s", exc)
        log.info("stopped; running jobs keep running and will be re-adopted")

    _exit_seen = False

    def _exits_pending(self) -> bool:
        seen, self._exit_seen = self._exit_seen, False
        return seen or self.runtime.needs_polling()

    def _dirty_ready(self, mono: float) -> bool:
        with self._lock:
            if self._first_dirty is None:
                return False
            quiet = mono - self._last_dirty >= self.config.debounce
            return quiet or mono - self._first_dirty >= MAX_DEBOUNCE

    def _timeout(self, next_resync: float, wake_at: float | None) -> float:
        mono = time.monotonic()
        timeout = next_resync - mono
        if wake_at is not None:
            timeout = min(timeout, wake_at - self.clock())
        kill_due = self.runtime.tick(self.clock())
        if kill_due is not None:
            timeout = min(timeout, kill_due - self.clock())
        with self._lock:
            if self._first_dirty is not None:
                timeout = min(timeout, max(self._last_dirty + self.config.debounce, mono) - mono,
                              self._first_dirty + MAX_DEBOUNCE - mono)
        if self.runtime.needs_polling():
            timeout = min(timeout, 0.5)  # no pidfd support: poll for exits
        if self.inventory_is_dynamic():
            timeout = min(timeout, self._gpus_read_at + GPU_REFRESH - mono)
        if self._index_due is not None:
            timeout = min(timeout, self._index_due - mono)
        return max(0.0, min(timeout, 60.0))

    def _poll_gpus(self, mono: float) -> bool:
        """Every GPU_REFRESH seconds (GPUs only): re-read the inventory; True when it changed, so a
        foreign process or a lost GPU is acted on without waiting for the resync."""
        if not self.inventory_is_dynamic() or mono < self._gpus_read_at + GPU_REFRESH:
            return False
        gpus = self.inventory.read()
        self._gpus_read_at = mono
        if _gpu_facts(gpus) == _gpu_facts(self.gpus):
            return False  # utilization and memory used move all the time; they decide nothing
        self._gpus_dirty = True
        return True

    def inventory_is_dynamic(self) -> bool:
        return bool(self.gpus)

    def reconcile_once(self, full: bool = False) -> tuple[float | None, bool]:
        """One level-triggered pass. Returns (next timer, pass again now?)."""
        from controller.admission import admit, admit_changes
        from controller.reconcile import Event, Snapshot, hold_start, reconcile

        pass_began = time.perf_counter()
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            self._first_dirty = None
        if full:
            self.store.scan()
        elif dirty:
            self.store.refresh(dirty)
        mono = time.monotonic()
        if self._gpus_dirty or mono - self._gpus_read_at >= GPU_REFRESH or full:
            self.gpus = self.inventory.read()
            self._gpus_read_at = mono
            self._gpus_dirty = False
        conda = self._conda
        if full or self._conda is None:
            self._conda = shutil.which("conda") is not None
        gone, came = self.store.take_changes()
        admission = None
        if not full and self._previous_admission is not None and conda == self._conda:
            admission = admit_changes(
                self._previous_admission, gone, came, controller_uid=os.geteuid(), conda_available=self._conda
            )
        if admission is None:  # a resync, or a change that needs every document (duplicates, sweeps, cycles)
            current_sources = {name: st.manifest for name, st in self.states.items() if st.manifest and not st.owner}
            current_sources.update({name: sw.manifest for name, sw in self.sweep_states.items() if sw.manifest})
            admission = admit(
                self.store.documents(), current_sources, controller_uid=os.geteuid(), conda_available=self._conda
            )
        now = self.clock()
        runs = self.runtime.observe()
        snapshot = Snapshot(
            admission=admission,
            states=self.states,
            runs=runs,
            gpus=self.gpus,
            allowed_gpus=set(self.config.gpus) if self.config.gpus is not None else None,
            job_pids=self.runtime.job_pids() if any(g.processes for g in self.gpus) else {},
            strategy=self.config.allocation_strategy,
            topology=self._topology(),
            unmanaged_threshold=self.config.unmanaged_memory_threshold,
            ignore_processes=frozenset(self.config.ignore_processes),
            default_grace=self.config.termination_grace_period,
            sweep_states=self.sweep_states,
            previous=self._previous_admission,
            unsettled=self._unsettled,
            max_starts=self._max_starts(),
            default_ttl=self.config.ttl_seconds_after_finished,
            finished_history=self.config.finished_jobs_history,
            bind_gpus=not getattr(self.runtime, "allocates_devices", False),
            policy=self.policy,
        )
        plan = reconcile(snapshot, now)
        again = plan.again
        # act
        for stop in plan.stops:
            self.runtime.stop(stop.name, stop.grace, stop.reason)
        for name, limit in plan.time_limits.items():
            self.runtime.set_time_limit(name, limit)
        for name in plan.consumed:  # before starts (a pass may record an exit and start anew); the
            self.runtime.forget(name)  # records on disk stay until purge(), after the status is written
        if plan.expired and self._delete_manifests(plan.expired):
            again = True
        started_at = time.perf_counter()
        self._decide_cost = started_at - pass_began
        for launch in plan.starts:
            self.runtime.start(launch)
        if plan.starts:
            cost = (time.perf_counter() - started_at) / len(plan.starts)
            self._start_cost = cost if self._start_cost is None else 0.8 * self._start_cost + 0.2 * cost
        if plan.starts:
            started = self.runtime.observe()
            for launch in plan.starts:
                run = started.get(launch.name)
                if run is not None and run.held:  # its launch could not be recorded: not a launch
                    hold_start(plan, run)
                elif run is not None:
                    plan.states[launch.name].pid = run.pid
                    plan.states[launch.name].backend_id = run.external_id or None
                    if not run.running:
                        again = True  # it could not start: record that at once
        # record
        warnings = {(w.source, w.reason, w.message): w for w in admission.warnings}
        for key in warnings.keys() - self._warned:  # report each bad file once, not every pass
            w = warnings[key]
            plan.events.append(Event("Warning", w.reason, w.name or "", w.message))
        self._warned = set(warnings)
        # what was decided and done holds in memory even if the disk refuses it (see writeguard)
        previous_states = self.states
        self.states = plan.states
        self.sweep_states = plan.sweeps
        self._previous_admission = admission
        self._unsettled = plan.unsettled
        try:
            self._record(plan, now, full)
        except OSError as exc:
            delay = self._write_failed(exc, now)
            self.passes += 1
            return (now + delay if plan.wake_at is None else min(plan.wake_at, now + delay)), again
        if self.observers is not None:  # cheap, never raises: see controller/observers.py
            self.observers.after_pass(previous_states, plan, runs, admission, now, time.perf_counter() - pass_began)
        self.passes += 1
        if self.passes == 1:
            gc.freeze()
        if full:  # at most once per resync: the cache only spares a restart from re-parsing
            try:
                self.store.save_cache()
            except OSError:  # a full disk: only a cache; the next resync tries again
                pass
        return plan.wake_at, again

    def _max_starts(self) -> int:
        """How many jobs one pass may start: as many as fit in START_BUDGET seconds, or in as long
        as the pass's own decisions took, at the measured cost of a start. A flood is then started
        over a few passes, each recorded and each a chance to hear SIGTERM, instead of a thousand
        passes that each re-sort the whole queue (with 40,000 waiting, deciding costs seconds)."""
        if self._start_cost is None:
            return MIN_STARTS
        budget = max(START_BUDGET, self._decide_cost)
        return max(MIN_STARTS, min(MAX_STARTS, int(budget / max(self._start_cost, 1e-5))))

    def _write_index(self, force: bool = False) -> None:
        """``run/index.json`` after a change, at most once per ``gap``: rewriting it costs O(jobs)
        (~10 ms at 10,000), so under a flood of passes it is coalesced, bounding that cost to a
        fifth of the loop's time; a write deferred here is done by the loop when due."""
        mono = time.monotonic()
        gap = min(max(4 * self._index_cost, INDEX_MIN_GAP), INDEX_MAX_GAP)
        if not force and mono < self._index_at + gap:
            self._index_due = self._index_at + gap
            return
        started = time.perf_counter()
        self.recorder.write_index({"pid": os.getpid(), "specDir": str(self.home.spec_dir)})
        self._index_cost = time.perf_counter() - started
        self._index_at = time.monotonic()
        self._index_due = None

    def _record(self, plan, now: float, full: bool) -> None:
        try:
            self.recorder.events(plan.events, now)
        except OSError as exc:  # events are in the log too; the status files matter more
            log.warning("could not append to %s: %s", self.home.events_file, exc)
        # after a failed write every record is compared again, so what did not reach the disk does now
        only = None if full or self.write_failures.failing else plan.looked_at
        changed = self.recorder.write_states(plan.states, plan.removed, only)
        changed = self.recorder.write_sweeps(plan.sweeps, plan.removed_sweeps) or changed
        # Only now that the outcome is on disk may the runtime drop an ended attempt's records: a
        # crash in between would otherwise find a Running status and no exit record (Lost).
        self.runtime.purge()
        if changed or full or self.passes == 0 or self.write_failures.failing:
            self._write_index(force=full or self.passes == 0 or self.write_failures.failing)
        self.recorder.write_node(plan.slots, self.inventory.describe())
        ended = self.write_failures.succeeded()
        if ended:
            self._event_best_effort("Normal", "StateWritable", f"state directory writable again after {ended} failed "
                                    "tries; status files caught up", now)

    def _write_failed(self, exc: OSError, now: float) -> float:
        from controller.writeguard import describe

        delay, first = self.write_failures.failed(exc)
        log.warning("cannot write the state directory: %s; retrying in %.1fs (running jobs are not affected)",
                    describe(exc), delay)
        if first:
            self._event_best_effort("Warning", "StateWriteFailed", f"cannot write the state directory: {describe(exc)}; "
                                    "retrying with backoff; running jobs are not affected", now)
        return delay

    def _event_best_effort(self, type_: str, reason: str, message: str, now: float) -> None:
        from controller.reconcile import Event

        try:
            self.recorder.events([Event(type_, reason, "", message)], now)
        except OSError:
            pass  # the same disk: the log line above is all we can do

    def _delete_manifests(self, jobs) -> bool:
        """TTL and history: the one case where gflowd edits the spec dir. A single-document file is
        removed; a document inside a multi-document file is cut out, the rest left as written, the
        file still the user's (owner, group and mode kept: the next job in it must not run as root).
        A file whose lock someone holds is left for a later pass, never waited for. True when
        something was removed."""
        from controller.fsutil import LockBusy, RewriteError, rewrite_locked
        from controller.manifest_edit import join_documents
        from controller.yamlio import YAMLSyntaxError, iter_documents_text, load_one

        by_path: dict[str, list[str]] = {}
        for job in jobs:
            by_path.setdefault(job.path, []).append(job.name)
        removed = False
        for path, names in by_path.items():

            def cut(text: str, path: str = path, names: list[str] = names) -> str | None:
                parts = list(iter_documents_text(text))
                keep = []
                for part in parts:
                    data = load_one(part)
                    name = (data.get("metadata") or {}).get("name") if isinstance(data, dict) else None
                    if name is None and len(parts) == 1:
                        name = Path(path).stem
                    if name not in names:
                        keep.append(part)
                if len(keep) == len(parts):
                    return text
                return join_documents(keep) if keep else None

            try:
                removed = rewrite_locked(Path(path), cut, within=self.home.spec_dir, wait=0) or removed
            except LockBusy:
                log.info("expired job(s) %s: %s is being edited; removing them on a later pass", ", ".join(names), path)
            except (OSError, YAMLSyntaxError, RewriteError) as exc:
                log.warning("could not remove expired job(s) %s from %s: %s", ", ".join(names), path, exc)
            self.mark_dirty(path)
        return removed

    def _topology(self) -> dict[tuple[int, int], int]:
        reader = getattr(self.inventory, "topology", None)
        if reader is None:
            return {}
        try:
            return reader()  # the NVML reader caches it while the set of GPUs stays the same
        except Exception:  # best effort: scheduling works without it
            return {}

    def _watch(self):
        """watchdog thread: file events mark paths dirty; the loop decides when to pass."""
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:  # pragma: no cover - a dependency; resync still works without it
            log.warning("watchdog is not installed: changes are seen on the resync tick only")
            return None
        controller = self
        fake = Path(self.config.fake_gpus).absolute() if self.config.fake_gpus else None

        class SpecHandler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.event_type in ("opened", "closed_no_write"):
                    return
                if event.is_directory and event.event_type in ("modified", "closed"):
                    return  # a folder "modified" by a file inside: the file's own event says which
                paths = [event.src_path, getattr(event, "dest_path", "") or ""]
                controller.mark_dirty(*(os.fsdecode(p) for p in paths if p))

        class GpuFileHandler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.event_type in ("opened", "closed_no_write"):
                    return
                paths = {os.fsdecode(event.src_path), os.fsdecode(getattr(event, "dest_path", "") or "")}
                if fake is not None and str(fake) in paths:
                    controller.mark_gpus_dirty()

        class ReviewHandler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.event_type not in ("created", "moved") or event.is_directory:
                    return
                from controller.review import answer_request

                path = os.fsdecode(getattr(event, "dest_path", "") or event.src_path)
                conda = controller._conda
                if conda is None:
                    conda = shutil.which("conda") is not None
                answer_request(Path(path), controller_uid=os.geteuid(), conda_available=conda)

        observer = Observer()
        observer.daemon = True
        observer.schedule(SpecHandler(), str(self.home.spec_dir), recursive=True)
        try:
            from controller.review import clear

            self.home.review_dir.mkdir(mode=0o755, exist_ok=True)
            clear(self.home.review_dir)
            observer.schedule(ReviewHandler(), str(self.home.review_dir), recursive=False)
        except OSError as exc:  # gflowctl then checks manifests itself
            log.warning("admission review disabled: cannot use %s: %s", self.home.review_dir, exc)
        if fake is not None and fake.parent.is_dir():
            observer.schedule(GpuFileHandler(), str(fake.parent), recursive=False)
        observer.start()
        return observer


# -- command line -------------------------------------------------------------------------------------

def _parse_gpus(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpus expects indices like 0,2, not {text!r}") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 1 (argparse's default is usage + exit 2)
        sys.stderr.write(f"gflowd: {message}\n")
        sys.exit(1)


def build_parser() -> argparse.ArgumentParser:
    """Every config.yaml key is also a flag (``allocationStrategy`` -> ``--allocation-strategy``),
    generated from the config model so the two never drift."""
    from typing import get_args, get_origin

    from controller.config import flag_fields, flag_name

    parser = _Parser(prog="gflowd", description="Run the gflow controller in the foreground.")
    parser.add_argument("--home", help="state directory (default $GFLOW_HOME or ~/.local/share/gflow)")
    for path, info in flag_fields():  # structured settings (webhooks) live in config.yaml only
        name, flag = ".".join(path), flag_name(path)
        default = info.default if info.default not in (None, [], PydanticUndefined) else None
        help_text = (info.description or "") + (f" (default {default})" if default is not None else "")
        kwargs: dict = {"dest": name, "help": help_text}
        if len(path) > 1:
            kwargs["metavar"] = path[-1].upper()
        literal = [a for a in get_args(info.annotation) if isinstance(a, str)]
        if get_origin(info.annotation) is Literal or literal:
            kwargs["choices"] = literal or list(get_args(info.annotation))
        if name == "gpus":
            kwargs["type"] = _parse_gpus
        elif int in get_args(info.annotation) or info.annotation is int:
            kwargs["type"] = int
        elif _is_list(info.annotation):
            kwargs["type"] = lambda text: [x.strip() for x in text.split(",") if x.strip()]
        parser.add_argument(flag, **kwargs)
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--version", action="version", version=f"gflowd {__import__('controller').__version__}")
    return parser


def _is_list(annotation) -> bool:
    from typing import get_args, get_origin

    if get_origin(annotation) is list:
        return True
    return any(get_origin(a) is list for a in get_args(annotation))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)-7s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    from controller.config import ConfigError, flag_fields, flag_overrides, load_config

    home = Home.resolve(args.home, None)
    try:
        config = load_config(
            home.config_file,
            flag_overrides({path: getattr(args, ".".join(path)) for path, _ in flag_fields()}),
        )
    except ConfigError as exc:
        sys.stderr.write(f"gflowd: {exc}\n")
        return 1
    home = Home.resolve(args.home, config.spec_dir)
    # state and logs are never world- or group-writable, whatever umask gflowd was started with
    # (jobs inherit it too, as from any daemon: systemd's default UMask is 0022 as well)
    os.umask(os.umask(0) | 0o022)
    try:
        home.ensure()
    except OSError as exc:
        sys.stderr.write(f"gflowd: cannot create {home.root}: {exc.strerror}\n")
        return 1
    from controller.security import spec_dir_problem

    problem = spec_dir_problem(home.spec_dir)
    if problem:
        sys.stderr.write(f"gflowd: {problem}\n")
        return 1
    if config.fake_gpus and not Path(config.fake_gpus).is_file():
        sys.stderr.write(f"gflowd: --fake-gpus: {config.fake_gpus} is not a file\n")
        return 1
    from controller.runtime import backend_switch_problem

    problem = backend_switch_problem(home, config.backend)
    if problem is None and config.backend == "slurm":
        from controller.runtime.slurm import check_slurm

        problem = check_slurm()
    if problem is not None:
        sys.stderr.write(f"gflowd: --backend {config.backend}: {problem}\n")
        return 1
    lock = InstanceLock(home.lock_file)
    try:
        lock.acquire()
    except AlreadyRunning as exc:
        sys.stderr.write(
            f"gflowd: another gflowd (pid {exc}) is already running for {home.root}; stop it first or use --home\n"
        )
        return 1
    web = None
    if config.web_port is not None:  # a thread serving the read-only dashboard from the state files
        from controller.web.server import DashboardError, start_dashboard

        try:
            web = start_dashboard(home, config.web_address, config.web_port)
        except DashboardError as exc:
            lock.release()
            sys.stderr.write(f"gflowd: {exc}\n")
            return 1
    from controller.fsutil import atomic_write
    from controller.gpus.inventory import FakeInventory
    from controller.gpus.nvml import NvmlInventory

    try:
        atomic_write(home.spec_dir_file, str(home.spec_dir) + "\n", durable=False)
    except OSError as exc:  # a full disk: gflowd must run all the same, its jobs need it most then
        log.warning("could not write %s (%s); gflowctl finds a custom spec dir once it can be written", home.spec_dir_file, exc)
    from controller.gpus.guard import GuardedInventory

    # NVML calls are bounded in time (a hung driver must not stall the loop); the fake file needs no guard
    inventory = FakeInventory(Path(config.fake_gpus).absolute()) if config.fake_gpus else GuardedInventory(NvmlInventory)
    from controller.observers import ObserverError, start_observers

    try:
        observers = start_observers(home, config)
    except ObserverError as exc:
        sys.stderr.write(f"gflowd: {exc}\n")
        if web is not None:
            web.stop()
        lock.release()
        return 1
    controller = Controller(home, config, inventory, observers=observers)
    signal.signal(signal.SIGTERM, controller.request_stop)
    signal.signal(signal.SIGINT, controller.request_stop)
    log.info("gflowd %s: home %s, spec dir %s, GPUs: %s", __import__("controller").__version__, home.root, home.spec_dir, inventory.describe())
    try:
        controller.run()
    finally:
        if web is not None:
            web.stop()
        getattr(inventory, "close", lambda: None)()
        observers.close()
        lock.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
