"""The read model gflowctl and the dashboard share: the index, each job's summary row, a status
file, which manifest defines a job, and whether a gflowd serves the home. Reads only; imports
stay light (``gflowctl get jobs`` loads neither pydantic nor ruamel)."""

from __future__ import annotations

import os
import pwd

from controller import API_VERSION
from controller.client.errors import GflowError
from controller.util.locks import lock_held

TYPE_CHECKING = False  # typing is not imported: every gflowctl verb loads this module (~2 ms)
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path  # not at run time: get jobs' table reads no Home (pathlib loads ipaddress, ~3 ms)
    from typing import Any

    from controller.paths import Home


def is_running(home: Home) -> bool:
    """True when some gflowd holds this home's lock (gflowctl warns about stale state otherwise)."""
    return lock_held(home.lock_file)


_index_cache: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}


def read_index(home: Home) -> dict[str, Any] | None:
    """``run/index.json``, parsed once per version of the file (apply -f DIR asks per document)."""
    import json  # lazy: get jobs reads the jobs table (marshal)

    try:
        with open(home.index_file, "rb") as handle:
            st = os.fstat(handle.fileno())
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            cached = _index_cache.get(str(home.index_file))
            if cached is not None and cached[0] == key:
                return cached[1]
            index = json.load(handle)
    except (OSError, ValueError):
        return None
    _index_cache[str(home.index_file)] = (key, index)
    return index


INDEX_LAG_MAX = 2.0  # seconds a status file may lead the index: record/writer.py INDEX_MAX_GAP, and a slow write


def await_index(home: Home, kind: str, name: str, status: dict[str, Any]) -> None:
    """Until the index (and the jobs table, written with it) shows ``status``'s phase and attempt for
    ``kind``/``name``. gflowd writes a status file at once but coalesces index writes (up to a
    second under a flood): a wait returns only once ``get jobs`` and ``Client.list`` agree with it."""
    import time  # lazy: only a wait that was met comes here

    want = (status.get("phase"), status.get("attempt"))
    if want[0] is None or not is_running(home):
        return  # nothing to compare, or no gflowd to bring the index up to date
    deadline = time.monotonic() + INDEX_LAG_MAX
    while True:
        try:  # written after the status file: caught up, without parsing an index of 50,000 jobs
            if os.stat(home.index_file).st_mtime_ns > os.stat(home.status_file(name)).st_mtime_ns:
                return
        except OSError:
            pass  # no status file (a job of a flood) or no index yet: compare the rows
        row = ((read_index(home) or {}).get(f"{kind}s") or {}).get(name)
        if not isinstance(row, dict) or (row.get("phase"), row.get("attempt", want[1])) == want:
            return  # not listed (a removed job), or caught up
        if time.monotonic() >= deadline:
            return  # an index write that fails: the wait's answer still stands
        time.sleep(0.02)


def read_status(home: Home, name: str) -> dict[str, Any] | None:
    """Job or sweep ``name``'s status document, None when there is none (or it is unreadable).
    A job of a flood has no status file for a moment (queued to start, or just started: see
    record/recorder.py ``_may_wait``); the index lists it meanwhile, and its row stands in."""
    from controller.util.yamlio import YAMLSyntaxError, load_one, load_own  # lazy: get jobs reads the JSON index only

    try:
        text = home.status_file(name).read_text()
    except FileNotFoundError:
        row = (read_index(home) or {}).get("jobs", {}).get(name)
        return status_from_row(name, row) if isinstance(row, dict) else None
    except OSError:
        return None
    try:
        data = load_own(text)  # gflowd's own YAML subset: ~10x faster than the real loader
    except ValueError:
        try:
            data = load_one(text)
        except YAMLSyntaxError:
            return None
    return data if isinstance(data, dict) else None


def status_from_row(name: str, row: dict[str, Any]) -> dict[str, Any]:
    """The status document an index row stands for: what ``get jobs`` knows of the job (no
    conditions, no usage), in the status file's shape, for readers of a job not yet written."""
    from controller.model.records import rfc3339 as _timestamp  # lazy: only a job without its status file yet

    status = {
        "phase": row.get("phase") or "Pending",
        "reason": row.get("reason"),
        "message": row.get("message"),
        "manifest": row.get("manifest"),
        "priority": row.get("priority"),
        "gpus": row.get("gpus"),
        "cpus": row.get("cpus"),
        "devices": list(row.get("devices") or []),
        "dependsOn": row.get("dependsOn"),
        "observedGeneration": row.get("generation"),
        "attempt": row.get("attempt"),
        "startTime": _timestamp(row.get("startTime")),
        "completionTime": _timestamp(row.get("completionTime")),
        "exitCode": row.get("exitCode"),
        "queuePosition": row.get("queuePosition"),
        "effectivePriority": row.get("effectivePriority"),
        "conditions": [],
    }
    metadata: dict[str, Any] = {"name": name, "creationTimestamp": _timestamp(row.get("created"))}
    if row.get("labels"):
        metadata["labels"] = dict(row["labels"])
    if row.get("owner"):
        metadata["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": "Sweep", "name": row["owner"]}]
    return {
        "apiVersion": API_VERSION,
        "kind": "JobStatus",
        "metadata": metadata,
        "status": {k: v for k, v in status.items() if v is not None},
    }


FEW_JSON_MAX = 8 << 20  # bytes of the status JSON journal worth reading for a few jobs asked by name


def status_json_texts(home: Home, names: list[str], few: bool = False) -> dict[str, str]:
    """Statuses as indented JSON text (what ``json.dumps(document, indent=2)`` gives for the parsed
    status file), from gflowd's JSON copies (``run/status-json.journal``, every status it wrote)
    for each name whose entry names its status file as it is now (one ``stat``); finished jobs an
    older gflowd wrote, from the records journal. Names not there are missing (the caller parses
    their YAML). ``few``: a few names asked for; their files are cheaper than a big journal."""
    from controller.util import records_journal as journal  # lazy: get jobs prints from the jobs table

    path = str(home.status_json_journal)
    if few:
        try:
            if os.stat(path).st_size > FEW_JSON_MAX:
                return {}
        except OSError:
            return {}
    last = journal.read(path, ("json",)).last
    texts: dict[str, str] = {}
    folder = str(home.status_dir) + os.sep
    for name in names:
        entry = last.get(name)
        if entry is None or type(entry[4]) is not str or "/" in name:
            continue
        try:
            if journal.key_of(os.stat(folder + name + ".yaml")) == journal.entry_key(entry):
                texts[name] = entry[4]
        except OSError:
            continue
    rest = [name for name in names if name not in texts]
    if rest and not few:
        texts.update(_journaled_status_texts(home, rest))
    return texts


def _journaled_status_texts(home: Home, names: list[str]) -> dict[str, str]:
    """Finished jobs' statuses as JSON text, rebuilt from the records journal (run/records.journal)
    where its line names the status file as it is now: statuses an older gflowd wrote."""
    import json  # lazy: only statuses without a JSON copy

    from controller.model.records import JOB_FIELDS, JobState  # lazy: only statuses without a JSON copy
    from controller.util import records_journal as journal

    entries = journal.read(str(home.records_journal), JOB_FIELDS)
    texts: dict[str, str] = {}
    for name in names:
        entry = entries.last.get(name)
        if entry is None:
            continue
        try:
            if journal.key_of(os.stat(home.status_file(name))) != journal.entry_key(entry):
                continue
            state = JobState.from_row(entry[4])
        except (OSError, TypeError, ValueError):
            continue
        if state.name == name:
            texts[name] = json.dumps(state.to_status(), indent=2)
    return texts


TABLE_BEHIND_INDEX = 5.0  # seconds: a table this much older than the index is not its writer's (see read_table)


def read_table(home: Home) -> Any:
    """``run/jobs.table`` (``controller.util.jobs_table.Table``), None without one of this format,
    or when the index is newer by ``TABLE_BEHIND_INDEX`` (gflowd touches the table at every index
    write, just before it: a gflowd that keeps no table, an older one, runs): the caller reads the
    index."""
    return read_table_at(str(home.jobs_table), str(home.index_file))


def read_table_at(table_path: str, index_path: str) -> Any:
    """``read_table`` from the two files' paths (gflowctl get jobs' quick path has no Home)."""
    from controller.util import jobs_table  # lazy: only get jobs' listings

    try:
        table_st = os.stat(table_path)
    except OSError:
        return None
    try:
        if os.stat(index_path).st_mtime - table_st.st_mtime > TABLE_BEHIND_INDEX:
            return None
    except OSError:
        pass  # no index: the table alone
    key = (table_st.st_ino, table_st.st_mtime_ns, table_st.st_size)
    cached = _table_cache.get(table_path)
    if cached is not None and cached[0] == key:
        return cached[1]  # read once per version (an edit verb looks up a job's owner, then its file)
    table = jobs_table.read(table_path)
    _table_cache[table_path] = (key, table)
    return table


_table_cache: dict[str, tuple[tuple[int, int, int], Any]] = {}


def user_names() -> Callable[[int], str]:
    """A lookup: uid -> user name (the uid as text when it has none); each uid named once."""
    names: dict[int, str] = {}

    def name_of(uid: int) -> str:
        name = names.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except (KeyError, OverflowError, TypeError):
                name = str(uid)
            names[uid] = name
        return name

    return name_of


def row_users(home: Home, rows: list[tuple]) -> list[str]:
    """The users jobs-table ``rows`` run as, in order: each uid named once; a row whose uid gflowd
    did not know: its manifest file's owner, as ``manifest_owners``."""
    from operator import itemgetter  # lazy: only get jobs' listings

    from controller.util.jobs_table import MANIFEST, UID  # lazy: as above

    uids = list(map(itemgetter(UID), rows))
    if None not in uids:
        return uid_users(uids)
    known = [uid for uid in uids if uid is not None]
    named = dict(zip(known, uid_users(known)))
    owner = manifest_owners(home)
    return [named[uid] if uid is not None else owner(row[MANIFEST]) for uid, row in zip(uids, rows)]


def uid_users(uids: list[int]) -> list[str]:
    """The user name of each uid (the uid as text when it has none), each distinct uid looked up once."""
    name_of = user_names()
    named = {uid: name_of(uid) for uid in set(uids)}
    return list(map(named.__getitem__, uids))


def job_rows(home: Home) -> dict[str, dict[str, Any]]:
    """name -> summary row; from the index when present, else from the status files."""
    index = read_index(home)
    if index is not None:
        return index.get("jobs", {})
    rows: dict[str, dict[str, Any]] = {}
    if not home.status_dir.is_dir():
        return rows
    from controller.model.records import JobState  # lazy: only without an index (get jobs stays lean)

    for path in sorted(home.status_dir.glob("*.yaml")):
        data = read_status(home, path.stem)
        if data is None:
            continue
        try:
            rows[path.stem] = JobState.from_status(data).summary()
        except (KeyError, TypeError, ValueError):
            continue
    return rows


def job_place(home: Home, name: str) -> tuple[str | None, str | None]:
    """Job ``name``'s (manifest path, owning Sweep) as gflowd knows them, (None, None) when it does not:
    from the jobs table when gflowd keeps one (a few MB at 50,000 jobs, where the index is ~20), else
    from the index. What ``run``, ``apply`` and the edit verbs read on every call."""
    table = read_table(home)
    if table is not None:
        from controller.util.jobs_table import MANIFEST, OWNER  # lazy: as read_table

        row = table.rows.get(name)
        return (row[MANIFEST], row[OWNER]) if row is not None else (None, None)
    row = job_rows(home).get(name) or {}
    return row.get("manifest"), row.get("owner")


def owner_of(home: Home, name: str) -> str | None:
    """The Sweep that owns job ``name``, if any."""
    return job_place(home, name)[1]


def manifest_owner_uid(home: Home, manifest: str | None) -> int | None:
    """The uid owning a job's ``manifest`` (as its status records it): the user the job runs as;
    None when the file is gone."""
    if not manifest:
        return None
    candidates = (
        [manifest] if os.path.isabs(manifest) else [str(home.root / manifest), str(home.spec_dir.parent / manifest)]
    )
    for candidate in candidates:
        try:
            return os.stat(candidate).st_uid
        except OSError:
            continue
    return None


def manifest_owners(home: Home) -> Callable[[str | None], str]:
    """A lookup: a job's ``manifest`` (as its status records it) -> the user name of the file's
    owner, the user the job runs as (``?`` when the file is gone). Uids are named once."""
    names: dict[int, str] = {}

    def owner(manifest: str | None) -> str:
        uid = manifest_owner_uid(home, manifest)
        if uid is None:
            return "?"
        if uid not in names:
            try:
                names[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                names[uid] = str(uid)
        return names[uid]

    return owner


def find_manifest(home: Home, name: str, kind: str = "job") -> Path | None:
    """The manifest file that defines ``name``: from its status, else ``<spec-dir>/<name>.yaml``."""
    if kind == "job":
        manifest = job_place(home, name)[0]
        if manifest is None and home.status_file(name).exists():
            # gflowd wrote its status, not yet the table and index it writes after (coalesced: up to
            # a second): the status names the file; else a new file of that name would be a duplicate
            manifest = ((read_status(home, name) or {}).get("status") or {}).get("manifest")
    else:
        manifest = (((read_index(home) or {}).get(f"{kind}s") or {}).get(name) or {}).get("manifest")
    if manifest:
        from pathlib import Path  # lazy: see TYPE_CHECKING above

        candidate = Path(manifest)
        path = candidate if candidate.is_absolute() else home.root / candidate
        if not path.exists():
            path = home.spec_dir.parent / candidate
        if path.exists():
            return path
    for suffix in (".yaml", ".yml"):
        path = home.spec_dir / f"{name}{suffix}"
        if path.exists():
            return path
    return None


def document_position(parts: list[str], name: str, path: Path) -> int | None:
    """Which of a manifest file's documents (``parts``, their texts) defines ``name``."""
    # lazy: get jobs loads this module and reads no manifest file
    from controller.api.names import document_name
    from controller.util.yamlio import YAMLSyntaxError, load_one

    for index, part in enumerate(parts):
        try:
            data = load_one(part)
        except YAMLSyntaxError:
            continue
        found, _ = document_name(data, path.stem, len(parts) == 1)
        if found == name:
            return index
    return None


FINISHED = ("Succeeded", "Failed", "Cancelled")


def reached(status: dict[str, Any], what: str, value: str) -> tuple[str | None, bool]:
    """For ``gflowctl wait --for=what=value`` on a job's ``status`` mapping (``what`` is ``phase``
    or ``condition``): the phase or condition type reached, as the status spells it, or None; and
    whether it can no longer be reached (a finished job will not change phase)."""
    phase = status.get("phase")
    if what == "phase":
        if phase is not None and phase.lower() == value.lower():
            return phase, False
        return None, phase in FINISHED
    for cond in status.get("conditions") or []:
        if cond.get("type", "").lower() == value.lower() and cond.get("status") == "True":
            return cond["type"], False
    return None, False


def select_rows(
    rows: dict[str, dict[str, Any]], names: list[str], selector: list[tuple[str, str, bool]], phases: list[str]
) -> list[tuple[str, dict]]:
    """The rows named (all when none), in name order, whose labels match ``selector`` and whose
    phase is one of ``phases`` (any when empty)."""
    if selector:
        from controller.api.labels import selector_matches  # lazy: only listing by label
    chosen = []
    wanted_phases = {p.lower() for p in phases}
    for name in names or sorted(rows):
        row = rows.get(name)
        if row is None:
            continue
        if selector and not selector_matches(selector, row.get("labels") or {}):
            continue
        if wanted_phases and str(row.get("phase", "")).lower() not in wanted_phases:
            continue
        chosen.append((name, row))
    return chosen


def read_node(home: Home) -> dict | None:
    """``node.yaml``, the GPU inventory gflowd writes; None before it has written one."""
    from controller.util.yamlio import YAMLSyntaxError, load_one  # lazy: only get gpus reads YAML

    try:
        return load_one(home.node_file.read_text()) or {}
    except FileNotFoundError:
        return None
    except (OSError, YAMLSyntaxError) as exc:
        raise GflowError(f"cannot read {home.node_file}: {exc}") from None


def sweep_params(home: Home, public: bool = False) -> Callable[[str | None, str | None], str]:
    """A lookup: (child job, its Sweep) -> the child's parameters, ``lr=0.01 bs=64`` ("" for an
    array's child or a job of no sweep); (None, Sweep) -> every value of each key, ``lr=0.1,0.01``. Read from the Sweep's manifest *as the caller*: values
    a 0600 manifest keeps from others are not shown to them (``hidden``). Each Sweep read once.
    ``public``: for a reader whose uid is not the viewer's (the dashboard, served as gflowd's user),
    only a world-readable manifest's values are shown."""
    from controller.model.sweep_params import child_params, params_text  # lazy: only listings that show them

    cache: dict[str, dict[str, dict[str, str]] | None] = {}

    def load(sweep: str) -> dict[str, dict[str, str]] | None:
        from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one  # lazy: as above

        path = find_manifest(home, sweep, kind="sweep")
        if path is None:
            return {}
        try:
            with open(path, encoding="utf-8") as handle:
                if public and not os.fstat(handle.fileno()).st_mode & 0o004:
                    return None  # decided on the file read, not on a path stat'ed apart
                parts = list(iter_documents_text(handle.read()))
        except PermissionError:
            return None
        except (OSError, UnicodeDecodeError):
            return {}
        position = document_position(parts, sweep, path)
        try:
            data = load_one(parts[position]) if position is not None else None
        except YAMLSyntaxError:
            data = None
        spec = data.get("spec") if isinstance(data, dict) else None
        return child_params(sweep, spec) if isinstance(spec, dict) else {}

    def lookup(child: str | None, sweep: str | None) -> str:
        if not sweep:
            return ""
        if sweep not in cache:
            cache[sweep] = load(sweep)
        found = cache[sweep]
        if found is None:
            return "hidden"
        if child is None:
            keys: dict[str, dict[str, None]] = {}
            for combo in found.values():
                for key, value in combo.items():
                    keys.setdefault(key, {})[value] = None
            return " ".join(f"{key}={','.join(values)}" for key, values in keys.items())
        return params_text(found.get(child) or {})

    return lookup


def time_limits(home: Home) -> Callable[[str, dict[str, Any]], float | None]:
    """A lookup: (job, its index row) -> its spec.timeLimit in seconds, None without one. Read from
    its manifest as the caller (a sweep child: the Sweep's template); each file parsed once."""
    from controller.api.units import parse_duration  # lazy: only the expected starts read limits
    from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one

    specs: dict[tuple[str, str], dict[str, Any] | None] = {}

    def spec_of(name: str, kind: str) -> dict[str, Any] | None:
        if (kind, name) not in specs:
            spec = None
            path = find_manifest(home, name, kind=kind)
            try:
                parts = list(iter_documents_text(path.read_text())) if path is not None else []
                position = document_position(parts, name, path) if parts and path is not None else None
                data = load_one(parts[position]) if position is not None else None
                spec = data.get("spec") if isinstance(data, dict) else None
                if kind == "sweep" and isinstance(spec, dict):
                    spec = spec.get("template")
            except (OSError, UnicodeDecodeError, YAMLSyntaxError):
                spec = None
            specs[(kind, name)] = spec if isinstance(spec, dict) else None
        return specs[(kind, name)]

    def lookup(name: str, row: dict[str, Any]) -> float | None:
        spec = spec_of(row["owner"], "sweep") if row.get("owner") else spec_of(name, "job")
        try:
            return parse_duration(spec["timeLimit"]) if spec and spec.get("timeLimit") is not None else None
        except (TypeError, ValueError):
            return None

    return lookup


def expected_starts(home: Home, rows: dict[str, dict[str, Any]], now: float) -> dict[str, Any]:
    """Each pending job's expected start (``controller.client.read.expected.Start``), from node.yaml's
    GPUs, the running jobs' ends and the queue order gflowd recorded (queuePosition)."""
    from controller.client.read.expected import plan_starts  # lazy: only describe and -o wide plan

    node = read_node(home) or {}
    gpus = [int(g["index"]) for g in node.get("gpus") or [] if isinstance(g, dict) and g.get("index") is not None]
    limit = time_limits(home)
    running = []
    for name, row in rows.items():
        if row.get("phase") == "Running" and row.get("devices"):
            seconds = limit(name, row)
            start = row.get("startTime")
            running.append(
                (
                    name,
                    [int(d) for d in row["devices"]],
                    None if seconds is None or start is None else float(start) + seconds,
                )
            )
    queued = sorted(
        (
            (row["queuePosition"], name)
            for name, row in rows.items()
            if row.get("phase") == "Pending" and isinstance(row.get("queuePosition"), int)
        )
    )
    pending = [(name, int(rows[name].get("gpus") or 0), limit(name, rows[name])) for _, name in queued]
    return plan_starts(now, gpus, running, pending)
