"""Observe, each pass: the spec dir (changed files re-read), the GPUs, the processes and the host,
gathered into one :class:`~controller.model.plan.Snapshot` for decide.

Observes only: nothing here decides what a document, a GPU or a process means.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from controller.model.gpus import Gpu
from controller.model.plan import Manifests, Memory, RunObservation, Snapshot
from controller.model.usage import UsageSettings
from controller.observe.cordons import CordonFile
from controller.observe.gpu_usage import JobPids, UsageSampler
from controller.observe.host import HostFacts
from controller.observe.inotify import SpecWatch
from controller.observe.manifests import ManifestStore
from controller.paths import Home

GPU_REFRESH = 2.0  # seconds between inventory reads when nothing else asks for one
# With the spec dir watched, one resync tick in this many is deep (every file looked at again,
# every record compared, the index rewritten); the others are ordinary passes. A deep tick costs
# O(files): at 50,000 manifests ~0.5 s of CPU, 6.7 % of a core at one every 10 s with nothing
# happening. What inotify reports (every write, rename, delete, attribute change, a queue overflow
# as the whole dir) is seen at once anyway; the deep tick is the net under what it cannot report.
DEEP_EVERY = 6
log = logging.getLogger("gflowd")


def _gpu_facts(gpus: list[Gpu]) -> tuple:
    # a process's utilization moves all the time; it decides something only through a usage sample.
    # Memory in use by no listed process (a leak freed) places jobs that declare gpuMemory: in
    # steps of 256 MiB, so allocator churn does not wake a pass
    return tuple(
        (
            g.index,
            g.uuid,
            g.healthy,
            g.error,
            g.memory_total,
            g.memory_used >> 28,
            tuple((p.pid, p.used_memory, p.name) for p in g.processes),
        )
        for g in gpus
    )


class _AllDocuments:
    """Every document of the store, listed only if a full admission iterates it."""

    def __init__(self, store: ManifestStore) -> None:
        self._store = store
        self._listed: list[Any] | None = None  # listed once per pass: a start's admission iterates it thrice

    def __iter__(self) -> Iterator[Any]:
        if self._listed is None:
            self._listed = self._store.documents()
        return iter(self._listed)


class SnapshotBuilder:
    """Holds what observing keeps between passes (the parse cache, the last GPU read) and builds
    each pass's snapshot. ``config``: gflowd's settings (``controller.api.config``)."""

    def __init__(
        self,
        home: Home,
        config: Any,
        inventory: Any,
        runtime: Any,
        policy: Any,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = ManifestStore(home.spec_dir, home.display, home.run_dir / "manifest-cache.json")
        self.config = config
        self.inventory = inventory
        self.runtime = runtime
        self.policy = policy
        # user names (one lookup per uid) for quotas and for the admin's policy: admins, classes, limits' messages
        self.host = HostFacts(
            want_user_names=bool(
                policy.user_quotas
                or policy.admins
                or policy.class_members
                or policy.reservations is not None
                or policy.max_pending_per_user
                or policy.max_running_per_user
            )
        )
        self.gpus: list[Gpu] = []
        self.cordons = CordonFile(home.cordon_file)
        self.gpus_read_at = -1e9  # monotonic time of the last inventory read
        self.gpus_dirty = True
        self.serial = 0  # the passes observed so far: the next snapshot's number
        self.clock = clock
        self.sampler = UsageSampler(config.gpu_sample_interval)
        self.job_pids = JobPids(runtime.job_pids)
        self.usage_dirty = False  # a sample was taken since the recorder last wrote run/gpu-usage.json
        self.usage_settings = UsageSettings(config.unused_gpu_window, config.idle_gpu_window, config.idle_timeout)
        self.runs: dict[str, RunObservation] = {}  # as the last pass saw them: what the next sample splits by job
        self.deep_next = True  # the next resync tick is deep (see resync_is_deep)
        self._quiet_ticks = 0
        try:
            self.sampler.load(home.gpu_usage_file.read_text())
        except OSError:
            pass  # first start, or nothing was running: no samples to carry over

    def resync_is_deep(self, watches: Any) -> bool:
        """Whether this resync tick looks at everything (``DEEP_EVERY``). Every tick is deep when the
        spec dir's inotify thread is not running (it could not start, or it stopped) or misses a
        folder (the watch limit; the spec dir itself deleted and made again), when a
        manifest is read through a symlink (inotify does not follow them), and after a pass failed
        (``deep_next``)."""
        watched = any(
            isinstance(part, SpecWatch) and part.is_alive() and part.complete for part in getattr(watches, "parts", ())
        )
        if self.deep_next or not watched or self._quiet_ticks + 1 >= DEEP_EVERY or self.store.through_symlinks():
            self.deep_next, self._quiet_ticks = False, 0
            return True
        self._quiet_ticks += 1
        return False

    def take(self, full: bool, dirty: set[str], memory: Memory, max_starts: int) -> Snapshot:
        """The snapshot of one pass: ``full`` re-checks every file, else only the ``dirty`` paths."""
        if full:
            self.store.scan()
        elif dirty or self.store.looks_again():
            self.store.refresh(dirty)
        # topology before the GPUs: an NVML call that hangs in it marks the GPUs read next unhealthy,
        # so node.yaml never says "NVML is not answering" next to GPUs this pass still trusted
        topology = self._topology()
        mono = time.monotonic()
        if self.gpus_dirty or mono - self.gpus_read_at >= GPU_REFRESH or full:
            self.gpus = self.inventory.read()
            self.gpus_read_at = mono
            self.gpus_dirty = False
        gone, came = self.store.take_changes()
        documents = _AllDocuments(self.store)
        host = self.host.read(full, documents if full else came)
        runs = self.runs = self.runtime.observe()
        job_pids = self.runtime.job_pids() if any(g.processes for g in self.gpus) else {}
        self._sample(lambda: self.job_pids.get(self.gpus, runs, self.clock(), fresh=job_pids))
        self.serial += 1
        config = self.config
        return Snapshot(
            admission=None,
            states=memory.states,
            runs=runs,
            gpus=self.gpus,
            allowed_gpus=set(config.gpus) if config.gpus is not None else None,
            cordoned=self.cordons.read(),
            job_pids=job_pids,
            strategy=config.allocation_strategy,
            topology=topology,
            unmanaged_threshold=config.unmanaged_memory_threshold,
            ignore_processes=frozenset(config.ignore_processes),
            default_grace=config.termination_grace_period,
            sweep_states=memory.sweep_states,
            reservation_states=memory.reservation_states,
            previous=memory.admission,
            unsettled=memory.unsettled,
            queue_memo=memory.queue_memo,
            parked=memory.parked,
            max_starts=max_starts,
            default_ttl=config.ttl_seconds_after_finished,
            finished_history=config.finished_jobs_history,
            bind_gpus=not self.runtime.allocates_devices,
            policy=self.policy,
            manifests=Manifests(documents, gone, came, full),
            host=host,
            serial=self.serial,
            gpu_usage=self.sampler.usage(),
            usage_settings=self.usage_settings,
        )

    def poll_gpus(self, mono: float) -> bool:
        """Every GPU_REFRESH seconds (GPUs only): re-read the inventory; True when it changed, so a
        foreign process or a lost GPU is acted on without waiting for the resync."""
        if not self.gpus_are_dynamic() or mono < self.gpus_read_at + GPU_REFRESH:
            return False
        cordons = self.cordons.cordons
        if self.cordons.read() != cordons:  # an admin cordoned, drained or uncordoned a GPU
            self.gpus_read_at = mono
            return True
        gpus = self.inventory.read()
        self.gpus_read_at = mono
        same = _gpu_facts(gpus) == _gpu_facts(self.gpus)
        self.gpus = gpus
        # utilization and memory used move all the time; they decide something only through the
        # usage sample, when a job's GPU starts or stops being used
        flipped = self._sample(lambda: self.job_pids.get(gpus, self.runs, self.clock()))
        if same and not flipped:
            return False
        self.gpus_dirty = not same
        return True

    def _sample(self, job_pids: Callable[[], dict[str, set[int]]]) -> bool:
        """A GPU usage sample of the running jobs, when one is due; True if a finding may flip.
        ``job_pids``: the jobs' process trees, asked for only when a sample is taken (a /proc walk)."""
        now = self.clock()
        if not self.sampler.due(now) or not (self.sampler.tracks or any(r.devices for r in self.runs.values())):
            return False
        try:
            flipped = self.sampler.sample(self.gpus, job_pids(), self.runs, now)
        except Exception:  # statistics: a bug here must not stop the loop
            log.exception("GPU usage sample failed")
            return False
        self.usage_dirty = True
        return flipped

    def gpus_are_dynamic(self) -> bool:
        return bool(self.gpus)

    def _topology(self) -> dict[tuple[int, int], int]:
        reader = getattr(self.inventory, "topology", None)
        if reader is None:
            return {}
        try:
            return reader()  # the NVML reader caches it while the set of GPUs stays the same
        except Exception:  # best effort: scheduling works without it
            return {}
