"""gflowd's loop: when to pass, and one pass as four calls.

Each pass is level-triggered: observe (``controller.observe``: manifests, GPUs, processes, host)
-> decide (``controller.decide``: pure) -> act (``controller.act``: start, stop, prune) -> record
(``controller.record``: status files, events, index, node), then the after-pass sinks. A pass runs
after file events (debounced), when a job process ends, when a timer is due, and on every resync
tick. This module owns only the timing: wake-ups, debounce, resync, the start budget.
"""

from __future__ import annotations

import gc
import logging
import os
import selectors
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from controller.act.apply import act
from controller.act.prune import prune_manifests
from controller.act.reclaim import Reclaimer
from controller.act.runtime import make_runtime
from controller.act.runtime.backends.local.attempt import boot_id
from controller.act.runtime.orphans import MARKER_VARIABLE
from controller.daemon.landings import Landings
from controller.daemon.review import answer_request, clear, expect_landing, judge_as, serve
from controller.decide.acted import fold_acted
from controller.decide.gpu_leaks import LeakVerdict, find_leaks
from controller.decide.policy import policy_from_config
from controller.decide.queue import request_of
from controller.decide.reconcile import decide
from controller.decide.scheduler import never_fits
from controller.model.documents import AdmittedJob
from controller.model.plan import ActResult, Memory, Plan, Snapshot
from controller.model.scheduling import GpuSlot
from controller.observe.gpu_leaks import LeakWatch, process_facts
from controller.observe.gpus.inventory import Inventory
from controller.observe.review_verdicts import ReviewVerdicts
from controller.observe.snapshot import GPU_REFRESH, SnapshotBuilder
from controller.observe.watch import start_watching
from controller.paths import Home
from controller.record.recorder import Recorder
from controller.record.writeguard import DISK_POLL, SpaceWatch
from controller.record.writer import INDEX_MAX_GAP, PassWriter
from controller.util.fsutil import free_bytes

log = logging.getLogger("gflowd")
MAX_DEBOUNCE = 0.2
START_BUDGET = 0.05  # seconds of job starts per pass (see Controller._max_starts)...
MIN_STARTS, MAX_STARTS = 32, 4096  # ...within these bounds


def _give_back_freed_memory() -> None:
    """Hand the C heap's free pages back to the system once start-up is over: reading 50,000 jobs
    frees ~20 MiB of parse-cache text, journal frames and temporaries in the middle of the heap, which
    glibc keeps (RSS 203 -> 184 MiB at 50,000 finished jobs). Once, after the first pass: a few ms.
    Not glibc (musl): nothing to do."""
    try:
        import ctypes  # lazy: gflowd needs it only for this one call

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


class Controller:
    def __init__(
        self,
        home: Home,
        config: Any,
        inventory: Inventory,
        runtime: Any = None,
        clock: Callable[[], float] = time.time,
        sinks: Any = None,
    ) -> None:
        self.home = home
        self.config = config
        self.inventory = inventory
        self.clock = clock
        self.runtime = runtime or make_runtime(home, config)
        # backfill, aging, fair share, quotas, limits: fixed for this run; whoever runs gflowd is its admin
        self.policy = policy_from_config(config, controller_uid=os.geteuid())
        self.observer = SnapshotBuilder(home, config, inventory, self.runtime, self.policy, clock)
        self.recorder = Recorder(home, clock)
        self.writer = PassWriter(home, self.recorder, inventory.describe, self.runtime.limits_summary)
        self.sinks = sinks  # controller.sinks.hooks.Sinks: history, metrics, webhooks
        # GPU memory an ended attempt left (docs/gpu-memory.md); its GPU attempts remembered across a restart
        self.leaks, self.reclaimer = LeakWatch(home.run_dir / "gpu-leftovers.json", boot_id()), Reclaimer()
        self.memory = Memory()
        # the GPUs as the last pass saw them, for the review's never-fits verdict (None: not yet
        # known, or a cluster backend places jobs); replaced whole each pass, read by the watcher thread
        self._review_slots: list[GpuSlot] | None = None
        self._review_cores: frozenset[int] | None = None
        self._review_capacity: dict[str, int] = {}
        self.passes = 0
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self._first_dirty: float | None = None
        self._last_dirty = 0.0
        self._at_once = False  # the pending change came after quiet, its files whole: no debounce
        self.landings = Landings()  # files a review let through, likely to land together (apply -f DIR)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stopping = False
        self._start_cost: float | None = None  # seconds per job start, a moving average
        self._decide_cost = 0.0  # seconds the last pass took before starting jobs
        self._space = SpaceWatch()  # while the disk refuses writes: retry as soon as space returns

    @property
    def store(self):
        return self.observer.store

    @property
    def states(self):
        return self.memory.states

    # -- wake-ups from other threads -------------------------------------------------------------

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # the pipe is full: a wake-up is already pending

    def mark_dirty(self, *paths: str, settled: bool = False) -> None:
        """``paths`` changed. ``settled``: their files are whole (the watch saw each renamed into
        place, closed after writing or deleted); after quiet, such a change is passed on at once:
        the debounce is for bursts, and a lone ``apply`` or ``run`` need not wait it out."""
        with self._lock:
            now = time.monotonic()
            if self._first_dirty is None:
                self._first_dirty = now
                self._at_once = settled and now - self._last_dirty >= self.config.debounce
            self._last_dirty = now
            self._dirty.update(paths)
        self.landings.landed(paths, now)
        self.wake()

    def mark_settled(self, *paths: str) -> None:
        self.mark_dirty(*paths, settled=True)

    def mark_gpus_dirty(self) -> None:
        self.observer.gpus_dirty = True
        self.mark_dirty()

    def request_stop(self, *_args: Any) -> None:
        self._stopping = True
        self.wake()

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        self.memory = Memory.loaded(*self.recorder.load())
        # The controller holds many long-lived objects (parsed manifests, states); the default GC
        # rescans them all every few thousand allocations. Collect young objects less often; after
        # the first pass, move what start-up loaded out of the collector's way (gc.freeze).
        gc.set_threshold(50_000, 20, 20)
        self.leaks.load(self.clock())
        adopted = self.runtime.adopt()
        if adopted:
            log.info("re-adopted %d running job(s): %s", len(adopted), ", ".join(sorted(adopted)))
        watcher = self._watch()
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
                gpus_changed = self.observer.poll_gpus(mono)
                space_back = self._space_returned()
                look_at = self.store.look_again_at()  # a manifest held back as half-written
                due_look = look_at is not None and mono >= look_at
                if (
                    again
                    or full
                    or due_timer
                    or due_look
                    or dirty_ready
                    or gpus_changed
                    or space_back
                    or self._exits_pending()
                ):
                    if full:
                        next_resync = mono + self.config.resync
                        full = self.observer.resync_is_deep(watcher)  # most ticks are ordinary passes when watched
                    try:
                        wake_at, again = self.reconcile_once(full=full)
                    except Exception:  # a bug or the environment failing: say so, keep serving
                        log.exception("reconcile pass failed; a full resync follows in 1s")
                        wake_at, again = None, False
                        next_resync = time.monotonic() + 1.0
                        self.observer.deep_next = True
                    if again:
                        continue
                if self.observer.usage_dirty:
                    self._write_gpu_usage()
                if self.writer.index_due is not None and time.monotonic() >= self.writer.index_due:
                    try:
                        self.writer.write_index()
                    except OSError:  # a full disk: the next pass's writes report it and retry
                        self.writer.index_due = time.monotonic() + INDEX_MAX_GAP
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
            if watcher is not None:
                watcher.stop()
            selector.close()
            self.runtime.close()
            self.reclaimer.close()
            self.writer.flush_events(self.clock())
            try:
                self.recorder.journal_unsettled()
                self.store.save_cache(any_change=True)
                if self.writer.index_due is not None:
                    self.writer.write_index(force=True)
            except OSError as exc:  # a full disk must not turn a clean stop into a traceback
                log.warning("could not save the manifest cache or the index while stopping: %s", exc)
        log.info("stopped; running jobs keep running and will be re-adopted")

    _exit_seen = False

    def _disk_trouble(self) -> bool:
        """The disk refused a status write or a launch record (jobs Pending/DiskFull)."""
        return self.writer.failures.failing or self.runtime.held_any

    def _space_returned(self) -> bool:
        """While the disk refuses writes: True once free space came back, with the held launches
        and the status writes due at once (no waiting for their backoff or a resync)."""
        if not self._disk_trouble():
            self._space.reset()
            return False
        try:  # where the status files and the launch records go (one disk or two: a sum grows either way)
            free = free_bytes(self.home.status_dir) + free_bytes(self.home.run_dir)
        except OSError:
            return False
        if not self._space.returned(free):
            return False
        log.debug("free space came back on %s; retrying the writes the disk refused", self.home.root)
        self.writer.failures.retry_now()
        self.runtime.retry_held()
        return True

    def _exits_pending(self) -> bool:
        seen, self._exit_seen = self._exit_seen, False
        return seen or self.runtime.needs_polling()

    def _dirty_ready(self, mono: float) -> bool:
        with self._lock:
            if self._first_dirty is None:
                return False
            if self._at_once:  # unless more files of one review are landing: then one pass for them all
                return self.landings.wait_until(mono) is None
            quiet = mono - self._last_dirty >= self.config.debounce
            return quiet or mono - self._first_dirty >= MAX_DEBOUNCE

    def _timeout(self, next_resync: float, wake_at: float | None) -> float:
        mono = time.monotonic()
        timeout = next_resync - mono
        if wake_at is not None:
            timeout = min(timeout, wake_at - self.clock())
        look_at = self.store.look_again_at()
        if look_at is not None:
            timeout = min(timeout, look_at - mono)
        kill_due = self.runtime.tick(self.clock())
        if kill_due is not None:
            timeout = min(timeout, kill_due - self.clock())
        with self._lock:
            if self._first_dirty is not None:
                landing = self.landings.wait_until(mono) if self._at_once else None
                timeout = min(
                    timeout,
                    (landing if landing is not None else mono) - mono
                    if self._at_once
                    else max(self._last_dirty + self.config.debounce, mono) - mono,
                    self._first_dirty + MAX_DEBOUNCE - mono,
                )
        if self.runtime.needs_polling():
            timeout = min(timeout, 0.5)  # no pidfd support: poll for exits
        if self._disk_trouble():
            timeout = min(timeout, DISK_POLL)  # look for free space coming back (_space_returned)
        if self.observer.gpus_are_dynamic():
            timeout = min(timeout, self.observer.gpus_read_at + GPU_REFRESH - mono)
        if self.writer.index_due is not None:
            timeout = min(timeout, self.writer.index_due - mono)
        return max(0.0, min(timeout, 60.0))

    # -- one pass ----------------------------------------------------------------------------------

    def reconcile_once(self, full: bool = False) -> tuple[float | None, bool]:
        """One level-triggered pass: observe -> decide -> act -> record. Returns (next timer, pass
        again now?)."""
        began = time.perf_counter()
        snapshot = self.observer.take(full, self._take_dirty(), self.memory, self._max_starts())
        now = self.clock()
        leaks = self._find_gpu_leaks(snapshot, now)
        if leaks is not None and leaks.reclaimed:  # the jobs' records say what is killed (their condition)
            snapshot = replace(snapshot, reclaimed=leaks.reclaimed)
        deciding = time.perf_counter()  # reading new manifests is not deciding (see _max_starts)
        plan = decide(snapshot, now)
        acted = self._act(plan, deciding)
        plan = fold_acted(plan, acted)  # the pids the starts got, a held launch: into the records
        wake_at = self._record(snapshot, plan, now, full, began)
        if leaks is not None:
            self._reclaim_gpu_memory(leaks, now)
        # a mass write beyond its owner's read budget (observe/manifests.py): read on in the next pass
        return wake_at, plan.again or acted.again or bool(self.store.deferred)

    def _find_gpu_leaks(self, snapshot: Snapshot, now: float) -> LeakVerdict | None:
        """What an ended attempt left holding GPU memory, and what a dead pid holds (None: no GPU
        lists a process). The attempts seen are remembered (``run/gpu-leftovers.json``) first."""
        self.leaks.attempts(self.runtime, snapshot.job_pids, now)
        if not any(g.processes for g in snapshot.gpus) and not self.leaks.held_since:
            self.leaks.save()
            return None
        ended = self.leaks.ended_attempts()
        verdict = find_leaks(
            ended,
            process_facts(snapshot.gpus, looking=bool(ended), marker=MARKER_VARIABLE),
            now,
            running_markers=self.leaks.running_markers(),
            managed_pids=frozenset(p for pids in snapshot.job_pids.values() for p in pids),
            ignore=snapshot.ignore_processes,
            held_since=self.leaks.held_since,
            killing=self.reclaimer.stopping(),
        )
        self.leaks.note_held(verdict.held)
        self.leaks.save()
        return verdict

    def _reclaim_gpu_memory(self, verdict: LeakVerdict, now: float) -> None:
        """Kill the leftovers and say so, once the statuses say it: a gflowd killed in between
        leaves a leftover the next one kills (it is remembered), never a kill the job does not show."""
        self.reclaimer.reclaim(verdict.kills)
        if verdict.events:
            try:
                self.recorder.events(verdict.events, now)
            except OSError:  # a full disk: the kill happened; the log line is all we can say
                pass

    def _write_gpu_usage(self) -> None:
        self.observer.usage_dirty = False
        try:
            self.recorder.write_gpu_usage(self.observer.sampler.dump())
        except OSError as exc:  # a full disk: statistics only; the next sample tries again
            log.debug("could not write %s: %s", self.home.gpu_usage_file, exc)

    def _prune(self, expired) -> list[str]:
        return prune_manifests(expired, within=self.home.spec_dir)

    def _take_dirty(self) -> set[str]:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            self._first_dirty = None
            self._at_once = False
        return dirty

    def _act(self, plan: Plan, began: float) -> ActResult:
        acted = act(plan, self.runtime, prune=self._prune)
        self._decide_cost = acted.starts_began - began
        if acted.start_cost is not None:
            cost = acted.start_cost
            self._start_cost = cost if self._start_cost is None else 0.8 * self._start_cost + 0.2 * cost
        if acted.pruned:
            self.mark_dirty(*acted.pruned)
        return acted

    def _record(self, snapshot: Snapshot, plan: Plan, now: float, full: bool, began: float) -> float | None:
        # what was decided and done holds in memory even if the disk refuses it (see writeguard)
        previous_states = self.memory.states
        self.memory = Memory.after(plan)
        self._review_slots = list(plan.slots) if snapshot.bind_gpus else None
        self._review_cores = plan.cores.cores if plan.cores is not None else None
        self._review_capacity = snapshot.host.capacity  # the counted kinds' (resources.shm)
        try:
            self.writer.write(plan, now, full, first=self.passes == 0, after_statuses=self.runtime.purge)
        except OSError as exc:
            delay = self.writer.failed(exc, now)
            self.passes += 1
            return now + delay if plan.wake_at is None else min(plan.wake_at, now + delay)
        if self.sinks is not None:  # cheap, never raises: see controller/sinks/hooks.py
            self.sinks.after_pass(
                previous_states,
                plan,
                snapshot.runs,
                plan.admission,
                now,
                time.perf_counter() - began,
                snapshot.gpu_usage,
            )
        self.passes += 1
        if self.passes == 1:
            gc.freeze()
            _give_back_freed_memory()
        if full:  # at most once per resync: the cache only spares a restart from re-parsing
            try:
                self.store.save_cache()
            except OSError:  # a full disk: only a cache; the next resync tries again
                pass
        due = self.recorder.write_due  # a flood's started job whose Running status waits (recorder._may_wait)
        if due is not None and (plan.wake_at is None or due < plan.wake_at):
            return due
        return plan.wake_at

    def _max_starts(self) -> int:
        """How many jobs one pass may start: as many as fit in START_BUDGET seconds, or in as long
        as the pass's own decisions took, at the measured cost of a start. A flood is then started
        over a few passes, each recorded and each a chance to hear SIGTERM, instead of a thousand
        passes that each re-sort the whole queue (with 40,000 waiting, deciding costs seconds).
        Small passes also let supervisors be reused: a pass's starts go to the launcher after its
        purge, and take the supervisors of the jobs whose ends it recorded; a pass of 500 starts
        needed 500 supervisors at once, each a fork. Parsing new manifests is not counted as
        deciding: a burst of 1,000 new files would otherwise make its next pass start ~500."""
        if self._start_cost is None:
            return MIN_STARTS
        budget = max(START_BUDGET, self._decide_cost)
        return max(MIN_STARTS, min(MAX_STARTS, int(budget / max(self._start_cost, 1e-5))))

    def _never_fits(self, job: AdmittedJob) -> str | None:
        """The review's verdict: why ``job`` can never start on this machine's GPUs, if so."""
        slots = self._review_slots
        return None if slots is None else never_fits(request_of(job), slots, self._review_cores, self._review_capacity)

    def _watch(self) -> Any:
        """watchdog thread: file events mark paths dirty; the loop decides when to pass."""
        review_dir: Path | None = self.home.review_dir
        try:
            self.home.review_dir.mkdir(mode=0o755, exist_ok=True)
            clear(self.home.review_dir)
        except OSError as exc:  # gflowctl then checks manifests itself
            log.warning("admission review disabled: cannot use %s: %s", self.home.review_dir, exc)
            review_dir = None
        host = self.observer.host
        verdicts = self.observer.store.verdicts = ReviewVerdicts()
        spec_dir = os.path.abspath(self.home.spec_dir)  # as the store spells the paths it reads
        serve(
            self.home.review_socket,
            lambda uid, request: judge_as(
                uid,
                request,
                controller_uid=host.controller_uid,
                conda_available=host.conda_available(),
                never_fits=self._never_fits,
            ),
            lambda uid, request, answer: expect_landing(
                verdicts, spec_dir, uid, request, answer, lambda paths: self.landings.expect(paths, time.monotonic())
            ),
        )
        return start_watching(
            self.home.spec_dir,
            self.mark_dirty,
            on_settled=self.mark_settled,
            fake_gpus=Path(self.config.fake_gpus).absolute() if self.config.fake_gpus else None,
            on_gpus=self.mark_gpus_dirty,
            review_dir=review_dir,
            on_review=lambda path: answer_request(
                path,
                controller_uid=host.controller_uid,
                conda_available=host.conda_available(),
                never_fits=self._never_fits,
            ),
        )
