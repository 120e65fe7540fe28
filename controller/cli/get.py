"""``gflowctl get jobs|sweeps|reservations|gpus``: tables from one file gflowd prepares (the jobs
table for ``get jobs``, the index for the rest and ``-o wide``), ``-o json`` from gflowd's JSON
copies of the statuses, details from status files."""

from __future__ import annotations

import os
import sys
import time

from controller.api.units import format_age
from controller.cli.common import (
    EVERY_KIND,
    CliError,
    is_tty,
    parse_refs,
    parse_selector_args,
    print_error,
    printable,
    resource_type,
    warn_if_not_running,
)
from controller.cli.get_table import (
    JOB_KINDS,
    RECENT,
    format_columns,
    pick,
    print_missing,
    print_rows,
    window,
)
from controller.client.read.state import (
    expected_starts,
    job_rows,
    manifest_owners,
    read_index,
    read_node,
    read_status,
    read_table,
    row_users,
    select_rows,
    status_json_texts,
    sweep_params,
)
from controller.paths import Home

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection

GPU_KINDS = ("gpus", "gpu", "node", "nodes")
SWEEP_KINDS = ("sweeps", "sweep")
RESERVATION_KINDS = ("reservations", "reservation")
EVENT_KINDS = ("events", "event", "ev")


def get(home: Home, args) -> int:
    if args.kind in JOB_KINDS + SWEEP_KINDS + RESERVATION_KINDS or "/" in args.kind:
        args.kind, args.names = _typed_names(args.kind, args.names)
    if args.kind in JOB_KINDS:
        selector = parse_selector_args(args.selector) if args.selector else []  # labels.py only for -l
        if args.watch:
            return _watch_jobs(home, args, selector)
        return _get_jobs(home, args, selector)
    if args.kind in GPU_KINDS:
        if args.watch:
            return _watch_gpus(home, args)
        return _get_gpus(home, args)
    if args.kind in SWEEP_KINDS:
        return _get_sweeps(home, args)
    if args.kind in RESERVATION_KINDS:
        return _get_reservations(home, args)
    if args.kind in EVENT_KINDS:
        from controller.cli.events import get_events  # lazy: the events reader only for get events

        if args.names:
            raise CliError("get events takes no names; use --for job/NAME")
        return get_events(home, args.for_object, args.output, args.watch)
    raise CliError(f"unknown resource type {args.kind!r}; use jobs, sweeps, reservations, gpus or events")


def _typed_names(kind: str, names: list[str]) -> tuple[str, list[str]]:
    """``get jobs a job/b`` and ``get job/a job/b`` (what ``-o name`` prints): the kind and bare names."""
    refs = parse_refs([kind, *names], type_first=True, kinds=EVERY_KIND)
    kinds = {k for k, _ in refs} or {resource_type(kind) or "job"}
    if len(kinds) > 1:
        other = sorted(kinds - {"job"})[0]
        raise CliError(
            "get lists one type at a time: "
            + " ".join(f"{k}/{n}" for k, n in refs if k == other)
            + f" are {other}s; use get {other}s"
        )
    listed = kinds.pop()
    if resource_type(kind) not in (None, listed):
        others = " ".join(f"{k}/{n}" for k, n in refs)
        raise CliError(f"get {kind} lists {resource_type(kind)}s, not {others}; use get {listed}s")
    return f"{listed}s", [n for _, n in refs]


def _print_documents(
    home: Home,
    names: list[str],
    single: bool,
    output: str,
    few: bool = False,
    users: dict[str, str] | None = None,
    copies: bool = True,
    present: Collection[str] | None = None,
) -> None:
    """``-o json`` and ``-o yaml`` print the same thing, as kubectl does: one object when one was
    asked for by name, else one ``kind: List`` document holding them all. Each object is the
    manifest's document (apiVersion, kind, metadata, spec) with gflowd's status, so that it can be
    applied again (``status`` and the read-only metadata are ignored there: api/validation.py).
    The status comes from gflowd's JSON copies where the copy is current (no YAML parsed), else
    from the status file; the spec from the manifest, where the caller may read it
    (client/read/specs.py). ``few``: a few jobs asked for by name, whose files are cheaper than a
    big journal of copies; ``copies``: False for kinds gflowd keeps no copies of. ``users``: name ->
    the user a job runs as, shown as ``metadata.user``; ``present``: every job there is (the texts
    kept of others are dropped)."""
    import json  # lazy: the table needs none (it reads marshal)

    from controller.client.read.specs import manifest_documents  # lazy: only -o yaml|json reads manifests

    users = users or {}
    kept = None
    listed = names
    if output == "json" and copies and names and not few:  # a listing: the texts printed before, where current
        from controller.client.read.object_texts import ObjectTexts  # lazy: only -o json listings

        kept = ObjectTexts(home, users)
        names = kept.stale(names)
    statuses: dict[str, dict] = {}
    journaled = status_json_texts(home, names, few) if copies and names and output == "json" else {}
    for name in names:
        text = journaled.get(name)
        doc = _head_of(text) if text is not None else read_status(home, name)
        if isinstance(doc, dict):
            statuses[name] = doc
    wanted = {name: (doc.get("status") or {}).get("manifest") for name, doc in statuses.items()}
    located: dict[str, object] = {}
    manifests = manifest_documents(home, wanted, located) if wanted else {}  # none: not even its cache
    objects, used = {}, {}
    for name, doc in statuses.items():
        entry = manifests.get(name)
        objects[name] = _object(doc, entry[0] if entry is not None else None, users.get(name))
        if entry is not None and entry[0].get("kind", "Job") == objects[name]["kind"]:
            used[name] = entry
    if output == "yaml":
        from controller.util.yamlio import dump  # lazy: only -o yaml

        items = list(objects.values())
        print(dump(items[0] if single and len(items) == 1 else _list(items), blocks=True), end="")
        return
    texts = [object_json(obj, journaled.get(name), used.get(name)) for name, obj in objects.items()]
    if kept is not None:
        texts = kept.merged(listed, dict(zip(objects, texts)), wanted, located, present)
    if single and len(texts) == 1:
        print(texts[0])
    elif not texts:
        print(json.dumps(_list([]), indent=2))
    else:
        # json.dumps(List, indent=2) exactly: each item indented one level deeper, comma-separated
        joined = ",\n".join("    " + text.replace("\n", "\n    ") for text in texts)
        print(f'{{\n  "apiVersion": "v1",\n  "kind": "List",\n  "items": [\n{joined}\n  ]\n}}')


def _list(items: list) -> dict:
    return {"apiVersion": "v1", "kind": "List", "items": items}


STATUS_KEY = '\n  "status": '
MANIFEST_KEY = '\n    "manifest": "'  # the status's own key (4 spaces: a nested key has more) with a string value


def _head_of(text: str) -> dict | None:
    """A JSON copy's document without the most of its status, which ``object_json`` copies as text:
    its metadata, and of its status the manifest (where to read the spec). A third of the time
    ``json.loads`` of the whole would take; the manifest's string read by json's C scanner."""
    import json
    from json.decoder import scanstring  # type: ignore[attr-defined]  # lazy: with json (typeshed omits it)

    at = text.rfind(STATUS_KEY)
    if at < 0 or not text.endswith("\n}"):
        return json.loads(text)
    doc = json.loads(text[:at].rstrip(",") + "\n}")
    found = text.find(MANIFEST_KEY, at)
    doc["status"] = {"manifest": scanstring(text, found + len(MANIFEST_KEY))[0]} if found >= 0 else {}
    return doc


def object_json(obj: dict, journaled: str | None = None, manifest: tuple | None = None) -> str:
    """``json.dumps(obj, indent=2)`` (an object of ``_object``), from texts made before where they
    exist: its ``status`` as gflowd's JSON copy wrote it, its spec, labels and annotations as
    gflowctl's manifest cache keeps them (client/read/specs.py). json's indenting encoder is pure
    Python: ~0.1 ms a job otherwise."""
    import json  # lazy: the table needs none
    from json.encoder import (
        encode_basestring_ascii as quoted,  # lazy: with json; json.dumps of a str, without its calls
    )

    at = journaled.rfind(STATUS_KEY) if journaled is not None else -1
    if journaled is None or at < 0 or not journaled.endswith("\n}"):
        status = json.dumps(obj["status"], indent=2).replace("\n", "\n  ")
    else:
        status = journaled[at + len(STATUS_KEY) : -2]
    made = manifest[1] if manifest is not None else {}

    def text(key: str, value, indent: str) -> str:
        if type(value) is str:
            return quoted(value)
        known = made.get(key)
        return (known if known is not None else json.dumps(value, indent=2)).replace("\n", "\n" + indent)

    meta = obj["metadata"]
    lines = [f"    {quoted(key)}: {text(key, value, '    ')}" for key, value in meta.items()]
    head = f'{{\n  "apiVersion": {json.dumps(obj["apiVersion"])},\n  "kind": {quoted(obj["kind"])},\n'
    head += '  "metadata": {\n' + ",\n".join(lines) + "\n  },\n" if meta else '  "metadata": {},\n'
    if "spec" in obj:
        head += f'  "spec": {text("spec", obj["spec"], "  ")},\n'
    return f'{head}  "status": {status}\n}}'


def _object(status: dict, manifest: dict | None, user: str | None) -> dict:
    """One object as ``get -o yaml|json`` prints it: the manifest's document (when readable) with
    the status file's ``status``; gflowd's own metadata (hashes of the spec) left out."""
    kind = str(status.get("kind") or "JobStatus").removesuffix("Status")
    if manifest is not None and manifest.get("kind", "Job") != kind:
        manifest = None  # the name is another kind's in that file (a Sweep's child: its Sweep's file)
    known = status.get("metadata") or {}
    own = (manifest.get("metadata") if manifest is not None else None) or {}
    if own and not isinstance(own, dict):
        own = {}
    meta: dict = {"name": known.get("name")}
    if user:
        meta["user"] = user
    for key, value in (
        ("creationTimestamp", known.get("creationTimestamp")),
        ("labels", own.get("labels") if manifest is not None else known.get("labels")),
        ("annotations", own.get("annotations")),
        ("ownerReferences", known.get("ownerReferences")),
    ):
        if value:
            meta[key] = value
    obj: dict = {"apiVersion": status.get("apiVersion") or (manifest or {}).get("apiVersion"), "kind": kind}
    obj["metadata"] = meta
    if manifest is not None and "spec" in manifest:
        obj["spec"] = manifest["spec"]
    obj["status"] = status.get("status") or {}
    return obj


def _get_sweeps(home: Home, args) -> int:
    owner, params = manifest_owners(home), sweep_params(home)

    def row_of(name: str, row: dict, now: float) -> list[str]:
        counts = row.get("counts") or {}
        return [
            name,
            owner(row.get("manifest")),
            str(row.get("phase", "")),
            str(row.get("children", 0)),
            str(counts.get("Running", 0)),
            str(counts.get("Succeeded", 0)),
            str(counts.get("Failed", 0)),
            format_age(now - float(row.get("created") or now)),
            params(None, name) or "-",
        ]

    header = ["NAME", "USER", "PHASE", "CHILDREN", "RUNNING", "SUCCEEDED", "FAILED", "AGE", "PARAMS"]
    return _get_records(home, args, "sweep", header, row_of)


def _get_reservations(home: Home, args) -> int:
    def row_of(name: str, row: dict, now: float) -> list[str]:
        return [
            name,
            ",".join(row.get("users") or []) or "-",
            ",".join(map(str, row.get("devices") or [])) or "-",
            _local_time(row.get("start")),
            _local_time(row.get("end")),
            str(row.get("phase", "")),
            format_age(now - float(row.get("created") or now)),
        ] + ([str(row.get("message", ""))] if args.output == "wide" else [])

    header = ["NAME", "USERS", "GPUS", "START", "END", "PHASE", "AGE"] + (["MESSAGE"] if args.output == "wide" else [])
    return _get_records(home, args, "reservation", header, row_of)


def _get_records(home: Home, args, kind: str, header: list[str], row_of) -> int:
    """``get sweeps|reservations``: the index's rows of that kind as a table, names, or documents."""
    rows = (read_index(home) or {}).get(f"{kind}s", {})
    missing = [n for n in args.names if n not in rows]
    chosen = select_rows(rows, args.names, parse_selector_args(args.selector), parse_phases(args.phase, kind))
    if args.output == "name":
        for name, _ in chosen:
            print(f"{kind}/{name}")
    elif args.output in ("yaml", "json"):
        owner = manifest_owners(home)
        _print_documents(
            home,
            [name for name, _ in chosen],
            len(args.names) == 1,
            args.output,
            few=True,
            users={name: owner(row.get("manifest")) for name, row in chosen},
            copies=False,
        )
    elif chosen:
        now = time.time()
        _print_table([header] + [row_of(name, row, now) for name, row in chosen])
    elif not missing:
        print(f"No {kind}s found.", file=sys.stderr)
    for name in missing:
        print_error(f"{kind}/{name} not found")
    return 1 if missing else 0


def _local_time(ts: float | str | None) -> str:
    """A window's edge as users write it: local time, to the minute."""
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(float(ts)))


def parse_phases(values: list[str], kind: str = "job") -> list[str]:
    """``--phase`` values as phases of ``kind``: comma lists, any case, squeue's codes (PD,R) for
    jobs and sweeps. Every word that names no phase is one error naming the phases (a typo must not
    print "No jobs found.")."""
    if not values:
        return []
    from controller.model.reasons import Phase, ReservationPhase  # lazy: only a listing that filters by phase

    phase_words = list(ReservationPhase) if kind == "reservation" else list(Phase)
    codes = {} if kind == "reservation" else {p.code: str(p) for p in Phase}  # squeue -t's, for hands that type them
    known = {p.lower(): str(p) for p in phase_words} | {code.lower(): p for code, p in codes.items()}
    phases, bad = [], []
    for word in (w.strip() for value in values for w in value.split(",")):
        if word.lower() in known:
            phases.append(known[word.lower()])
        elif word:
            bad.append(word)
    if bad:
        from difflib import get_close_matches  # lazy: only a mistyped phase

        hints = [
            f"{w!r} (did you mean {close[0]}?)"
            if (close := get_close_matches(w.capitalize(), phase_words, n=1))
            else repr(w)
            for w in bad
        ]
        also = f" or squeue's {','.join(codes)}" if codes else ""
        raise CliError(
            f"--phase: no {kind} phase {', '.join(hints)}; use {', '.join(phase_words)}{also}, comma-separated"
        )
    return phases


def wanted_users(args) -> set[str]:
    """``--user NAME[,NAME]`` (``-u``) and ``--me``: the user names whose jobs to list (empty: all)."""
    users = {u.strip() for value in getattr(args, "user", None) or [] for u in value.split(",") if u.strip()}
    if getattr(args, "me", False):
        import pwd  # lazy: only --me

        users.add(pwd.getpwuid(os.getuid()).pw_name)
    return users


def choose_jobs(home: Home, rows: dict[str, dict], args, selector, owner) -> tuple[list[tuple[str, dict]], int]:
    """The rows ``get jobs`` lists, and how many finished ones the default window hid: by name,
    label, phase and user; without names or ``-A``, only active jobs and those ended in the last day."""
    chosen = select_rows(rows, args.names, selector, parse_phases(args.phase))
    users = wanted_users(args)
    if users:
        chosen = [(n, r) for n, r in chosen if owner(r.get("manifest")) in users]
    if args.names or getattr(args, "all", False) or args.phase:
        return chosen, 0
    since = time.time() - RECENT
    recent = [(n, r) for n, r in chosen if not r.get("completionTime") or float(r["completionTime"]) >= since]
    return recent, len(chosen) - len(recent)


def _get_jobs(home: Home, args, selector) -> int:
    if getattr(args, "tree", False) and args.output not in (None, "wide"):
        raise CliError(f"--tree draws the table; use it without -o {args.output} (or with -o wide)")
    if not getattr(args, "tree", False) and args.output in (None, "name", "json", "yaml"):
        table = read_table(home)
        if table is not None:
            return _get_jobs_from_table(home, args, selector, table)
    rows = job_rows(home)
    owner = manifest_owners(home)
    missing = [n for n in args.names if n not in rows]
    chosen, hidden = choose_jobs(home, rows, args, selector, owner)
    out = args.output
    if out == "name":
        for name, _ in chosen:
            print(f"job/{name}")
    elif out in ("yaml", "json"):
        # a few jobs by name: their files; else the journal, read once for them all
        _print_documents(
            home,
            [name for name, _ in chosen],
            len(args.names) == 1,
            out,
            few=0 < len(chosen) <= 8 and bool(args.names),
            users={n: owner(r.get("manifest")) for n, r in chosen},
            present=rows,
        )
    else:
        if not chosen:  # names not found alone: their errors, no header (kubectl)
            if not missing:
                print("No jobs found.", file=sys.stderr)
        elif getattr(args, "tree", False):
            sweeps = (read_index(home) or {}).get("sweeps") or {}
            _print_table(_tree_table(chosen, sweeps, wide=out == "wide", user_of=owner, params=sweep_params(home)))
        else:
            wide = out == "wide"
            _print_table(
                _job_table(
                    chosen,
                    wide=wide,
                    owner=owner,
                    params=sweep_params(home) if wide else None,
                    starts=expected_starts(home, rows, time.time()) if wide else None,
                    live=_live_util(home, chosen) if wide else None,
                )
            )
        if hidden:
            print(f"({hidden} jobs that ended more than a day ago not shown; -A lists them)", file=sys.stderr)
    warn_if_not_running(home)  # a stopped gflowd leaves Running rows that no longer run
    for name in missing:
        print_error(f"job/{name} not found")
    return 1 if missing else 0


def _get_jobs_from_table(home: Home, args, selector, table) -> int:
    """``get jobs`` (the default table, ``-o name|json|yaml``) from gflowd's jobs table alone: the
    rows as the table prints them, no file per job (util/jobs_table.py). The same output as from the
    index (``_get_jobs``)."""
    rows = table.rows
    missing = [n for n in args.names if n not in rows]
    chosen, hidden = _choose_table_rows(home, rows, table.ordered, args, selector)
    out = args.output
    if out in ("yaml", "json"):
        _print_documents(
            home,
            [row[0] for row in chosen],
            len(args.names) == 1,
            out,
            few=0 < len(chosen) <= 8 and bool(args.names),
            users=dict(zip([row[0] for row in chosen], row_users(home, chosen))),
            present=rows,
        )
    else:
        print_rows(chosen, row_users(home, chosen), out, hidden, missing)
    warn_if_not_running(home)  # a stopped gflowd leaves Running rows that no longer run
    return print_missing(missing)


def _choose_table_rows(home: Home, rows: dict[str, tuple], ordered: bool, args, selector) -> tuple[list[tuple], int]:
    """``choose_jobs`` for jobs-table rows: by name, label, phase and user; without names or ``-A``,
    only active jobs and those ended in the last day."""
    from controller.util.jobs_table import LABELS, PHASE  # lazy: as read_table

    chosen = pick(rows, ordered, args.names)
    if selector:
        from controller.api.labels import selector_matches  # lazy: only listing by label

        chosen = [row for row in chosen if selector_matches(selector, row[LABELS] or {})]
    phases = {p.lower() for p in parse_phases(args.phase)}
    if phases:
        chosen = [row for row in chosen if row[PHASE].lower() in phases]
    users = wanted_users(args)
    if users:
        chosen = [row for row, user in zip(chosen, row_users(home, chosen)) if user in users]
    return window(chosen, args.names, getattr(args, "all", False), args.phase)


def _tree_table(
    chosen: list[tuple[str, dict]], sweeps: dict[str, dict], wide: bool, user_of, params=None
) -> list[list[str]]:
    """``get jobs --tree`` (gqueue -t): each job under the first parent it waits for, a Sweep's
    children under the Sweep; a job after several parents names the others ("also after b")."""
    rows = dict(chosen)
    nodes: dict[tuple[str, str], dict] = {("job", n): r for n, r in chosen if r.get("owner") not in sweeps}
    for _, row in chosen:
        owner = row.get("owner")
        if owner in sweeps:
            nodes.setdefault(("sweep", owner), sweeps[owner])

    def exists(name: str) -> tuple[str, str] | None:
        return next((key for key in (("job", name), ("sweep", name)) if key in nodes), None)

    parent_of: dict[tuple[str, str], tuple[str, str]] = {}
    also: dict[tuple[str, str], list[str]] = {}
    children: dict[tuple[str, str] | None, list[tuple[str, str]]] = {}
    for key in nodes:
        if key[0] == "job":
            deps = rows[key[1]].get("dependsOn") or []
        else:  # a Sweep waits for what its children wait for
            deps = next((rows[n].get("dependsOn") or [] for n, r in chosen if r.get("owner") == key[1]), [])
        found = [k for k in (exists(d) for d in deps) if k is not None and k != key]
        if found:
            parent_of[key] = found[0]
            also[key] = [k[1] for k in found[1:]]
    members: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for name, row in chosen:  # sweep children hang under their Sweep, before what waits for it
        if row.get("owner") in sweeps:
            members.setdefault(("sweep", row["owner"]), []).append(("job", name))
    for key, parent in parent_of.items():
        children.setdefault(parent, []).append(key)
    roots = [key for key in nodes if key not in parent_of]
    created = {
        **{("job", n): r.get("created") or 0 for n, r in chosen},
        **{("sweep", n): s.get("created") or 0 for n, s in sweeps.items()},
    }

    def order(keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return sorted(keys, key=lambda k: (created.get(k, 0), k[1]))

    table = _job_table([], wide, user_of)
    seen: set[tuple[str, str]] = set()

    def walk(key: tuple[str, str], lead: str, last: bool, top: bool) -> None:
        if key in seen:  # a cycle (admission rejects them; old records may still show one)
            return
        seen.add(key)
        branch = "" if top else lead + ("└─ " if last else "├─ ")
        if key[0] == "job":
            line = _job_table([(key[1], rows[key[1]])], wide, user_of, params)[1]
        else:
            line = _sweep_line(key[1], nodes[key], wide, user_of)
        line[0] = branch + line[0] + (f" (also after {', '.join(also[key])})" if also.get(key) else "")
        table.append(line)
        kids = order(members.get(key, [])) + order(children.get(key, []))
        for i, kid in enumerate(kids):
            walk(kid, "" if top else lead + ("   " if last else "│  "), i == len(kids) - 1, False)

    for root in order(roots):
        walk(root, "", True, True)
    return table


def _sweep_line(name: str, row: dict, wide: bool, owner) -> list[str]:
    counts = row.get("counts") or {}
    told = ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items()) if n)
    line = [
        f"sweep/{name}",
        owner(row.get("manifest")),
        str(row.get("phase", "")),
        "-",
        "-",
        "-",
        format_age(time.time() - float(row.get("created") or time.time())),
        f"{row.get('children', 0)} children" + (f": {told}" if told else ""),
    ]
    return line + (
        ["-", "-", "-", "-", "-", "-", "-", str(row.get("manifest") or "-"), str(row.get("message", ""))]
        if wide
        else []
    )


def _start_cell(start, now: float) -> str:
    """-o wide's START: when a pending job is expected to start (squeue --start); ``?`` not known."""
    if start is None:
        return "-"
    if start.at is None:
        return "?"
    return "now" if start.at <= now else time.strftime("%m-%d %H:%M", time.localtime(start.at))


def _live_util(home: Home, chosen: list[tuple[str, dict]]) -> dict[str, float]:
    """Running jobs' mean GPU utilization as of gflowd's latest sample, as describe shows it (the
    status's copy, in the index, is refreshed about once a minute)."""
    if not any(row.get("phase") == "Running" for _, row in chosen):
        return {}
    from controller.client.read.usage import live_summary, read_usage  # lazy: only -o wide with running jobs

    usage = read_usage(home)
    live = {}
    for name, row in chosen:
        summary = live_summary(usage, name, row.get("attempt")) if row.get("phase") == "Running" else None
        if summary and summary.get("utilMean") is not None:
            live[name] = summary["utilMean"]
    return live


def _job_table(
    chosen: list[tuple[str, dict]], wide: bool, owner, params=None, starts=None, live=None
) -> list[list[str]]:
    """``owner``: a job's manifest -> the user it runs as (``manifest_owners``); for -o wide,
    ``params``: a sweep child's values (``sweep_params``), ``starts``: expected starts, ``live``:
    running jobs' latest GPU utilization."""
    now = time.time()
    header = ["NAME", "USER", "PHASE", "GPUS", "DEVICES", "PRIORITY", "AGE", "REASON"]
    if wide:
        header += ["CPUS", "EFFECTIVE", "ATTEMPT", "EXIT", "UTIL", "START", "PARAMS", "MANIFEST", "MESSAGE"]
        params = params or (lambda child, sweep: "")
        starts = starts or {}
    table = [header]
    for name, row in chosen:
        devices = row.get("devices") or []
        line = [
            name,
            owner(row.get("manifest")),
            str(row.get("phase", "")),
            str(row.get("gpus", 0)),
            ",".join(str(d) for d in devices) if devices else "-",
            str(row.get("priority", 0)),
            format_age(now - float(row.get("created") or now)),
            str(row.get("reason", "")),
        ]
        if wide:
            exit_code = row.get("exitCode")
            effective = row.get("effectivePriority")
            util = (live or {}).get(name, row.get("gpuUtil"))  # the latest attempt's mean GPU utilization
            line += [
                str(row.get("cpus") or "-"),
                "-" if effective is None else str(effective),
                str(row.get("attempt", 0)),
                "-" if exit_code is None else str(exit_code),
                "-" if util is None else f"{round(util)}%",
                _start_cell(starts.get(name), now),
                params(name, row.get("owner")) or "-",
                str(row.get("manifest") or "-"),
                str(row.get("message", "")),
            ]
        table.append(line)
    return table


def _format_table(table: list[list[str]]) -> list[str]:
    """Aligned rows; every cell escaped for the terminal (file names, messages, GPU names)."""
    return _format_columns(list(zip(*table)))


_format_columns = format_columns  # the table of every listing: one implementation (get_table.py)


def _print_table(table: list[list[str]]) -> None:
    sys.stdout.write("\n".join(_format_table(table)) + "\n")


def _watch_jobs(home: Home, args, selector) -> int:
    """On a terminal: the table, redrawn in place when the index changes. Otherwise: the table,
    then a row each time a job's phase or reason changes, aligned with the rows before it
    (kubectl -w). With ``-o json|yaml|name``: each job as it changes, one object (or name) each."""
    if args.output in ("json", "yaml", "name"):
        return _watch_job_objects(home, args, selector)
    if is_tty():
        owner = manifest_owners(home)
        return _redraw(
            home.index_file,
            lambda: _job_table(
                choose_jobs(home, job_rows(home), args, selector, owner)[0],
                wide=args.output == "wide",
                owner=owner,
                params=sweep_params(home),
            ),
        )
    owner = manifest_owners(home)
    widths: list[int] = []  # the columns as printed so far: later rows line up with them
    try:
        for first, changed in _job_changes(home, args, selector, owner):
            table = _job_table(changed, wide=args.output == "wide", owner=owner, params=sweep_params(home))
            padded = [*table, [" " * w for w in widths]] if widths else table
            widths = [max(len(cell) for cell in column) for column in zip(*padded)]
            lines = _format_table([table[0], [" " * w for w in widths], *table[1:]])
            sys.stdout.write("\n".join(lines[:1] + lines[2:] if first else lines[2:]) + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        return 0
    return 0


def _watch_job_objects(home: Home, args, selector) -> int:
    """``get jobs -w -o json|yaml|name``: every chosen job once, then each job again as it changes."""
    owner = manifest_owners(home)
    try:
        for _, changed in _job_changes(home, args, selector, owner):
            names = [name for name, _ in changed]
            if args.output == "name":
                sys.stdout.write("".join(f"job/{name}\n" for name in names))
            else:
                users = {name: owner(row.get("manifest")) for name, row in changed}
                for name in names:
                    if args.output == "yaml":
                        sys.stdout.write("---\n")
                    _print_documents(home, [name], True, args.output, few=True, users=users)
            sys.stdout.flush()
    except KeyboardInterrupt:
        return 0
    return 0


def _job_changes(home: Home, args, selector, owner):
    """(first, [(name, row)...]): the chosen jobs at once, then those whose phase, reason or devices
    changed, each time the index does. Runs until Ctrl-C."""
    seen: dict[str, tuple] = {}
    first = True
    mtime = None
    while True:
        try:
            current = home.index_file.stat().st_mtime_ns
        except OSError:
            current = None
        if first or current != mtime:
            mtime = current
            chosen, _ = choose_jobs(home, job_rows(home), args, selector, owner)
            changed = [(n, r) for n, r in chosen if seen.get(n) != (r.get("phase"), r.get("reason"), r.get("devices"))]
            if first or changed:
                yield first, chosen if first else changed
            for n, r in chosen:
                seen[n] = (r.get("phase"), r.get("reason"), r.get("devices"))
            first = False
        time.sleep(0.2)


def _redraw(path, table, interval: float = 0.2) -> int:
    """Redraw ``table()`` in place whenever ``path`` changes (and each second, for the ages)."""
    from controller.cli.live import (  # lazy: the live table only for get -w
        LiveTable,
        clock_footer,
    )

    live = LiveTable()
    mtime: object = ()
    drawn_at = 0.0
    try:
        while True:
            try:
                current = path.stat().st_mtime_ns
            except OSError:
                current = None
            if current != mtime or time.monotonic() - drawn_at >= 1.0:
                mtime, drawn_at = current, time.monotonic()
                rows = table()
                live.draw(_format_table(rows) if rows and len(rows) > 1 else ["(nothing yet)"], clock_footer())
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0


def _job_users(home: Home):
    """A lookup: job name -> the user it runs as (get gpus' USER column)."""
    rows, owner = job_rows(home), manifest_owners(home)
    return lambda job: owner((rows.get(job) or {}).get("manifest"))


def _gpu_table(gpus: list[dict], reserved: dict[int, str] | None = None, user_of=None) -> list[list[str]]:
    table = [["INDEX", "NAME", "MEMORY", "FREE", "UTIL", "STATE", "JOBS", "USER"] + (["RESERVED"] if reserved else [])]
    for gpu in gpus:
        util = gpu.get("utilization")
        jobs = gpu.get("jobs") or []
        table.append(
            [
                str(gpu.get("index")),
                str(gpu.get("name")),
                f"{gpu.get('memoryUsed', '0')}/{gpu.get('memory', '?')}",
                str(gpu.get("memoryFree", "-")),
                "-" if util is None else f"{util}%",
                ("Draining" if gpu["cordon"].startswith("drained") else "Cordoned")
                if gpu.get("cordon")
                else str(gpu.get("state")),
                ",".join(jobs) or "-",
                ",".join(dict.fromkeys(user_of(job) for job in jobs)) if jobs and user_of else "-",
            ]
            + ([reserved.get(gpu.get("index", -1), "-")] if reserved else [])
        )
    return table


def _reserved(home: Home) -> dict[int, str]:
    """GPU index -> the reservations that hold it, ``alice 14:00-16:00 (r1)``, from the index."""
    rows = (read_index(home) or {}).get("reservations") or {}
    live = {
        n: r for n, r in rows.items() if r.get("phase") in ("Pending", "Active") and r.get("start") and r.get("end")
    }
    if not live:
        return {}
    from datetime import UTC, datetime  # lazy: only when a reservation is there to show

    from controller.decide.reservations import window_text  # lazy: as above

    now, zone = time.time(), datetime.now().astimezone().tzinfo or UTC
    out: dict[int, list[str]] = {}
    for name, row in sorted(live.items(), key=lambda item: item[1]["start"]):
        text = f"{','.join(row.get('users') or [])} {window_text(row['start'], row['end'], zone, now)} ({name})"
        for device in row.get("devices") or []:
            out.setdefault(int(device), []).append(text)
    return {index: "; ".join(texts) for index, texts in out.items()}


def _watch_gpus(home: Home, args) -> int:
    """``get gpus -w``: on a terminal the table redrawn in place when node.yaml changes; otherwise
    the table once, then a row for each GPU whose row changed."""
    if args.output is not None:
        raise CliError("get gpus -w prints a table; drop -o")
    if is_tty():
        return _redraw(
            home.node_file,
            lambda: _gpu_table((read_node(home) or {}).get("gpus") or [], _reserved(home), _job_users(home)),
        )
    seen: dict[str, list[str]] = {}
    first = True
    mtime: object = ()
    try:
        while True:
            try:
                current = home.node_file.stat().st_mtime_ns
            except OSError:
                current = None
            if current != mtime:
                mtime = current
                table = _gpu_table((read_node(home) or {}).get("gpus") or [], _reserved(home), _job_users(home))
                changed = [row for row in table[1:] if seen.get(row[0]) != row]
                if first or changed:
                    lines = _format_table([table[0], *(table[1:] if first else changed)])
                    sys.stdout.write("\n".join(lines if first else lines[1:]) + "\n")
                    sys.stdout.flush()
                seen = {row[0]: row for row in table[1:]}
                first = False
            time.sleep(0.2)
    except KeyboardInterrupt:
        return 0


def _get_gpus(home: Home, args) -> int:
    node = read_node(home)
    if node is None:
        warn_if_not_running(home)
        print("No GPUs known yet (gflowd writes node.yaml when it runs).", file=sys.stderr)
        return 0
    gpus = node.get("gpus") or []
    if args.output == "json":
        import json  # lazy: as above

        print(json.dumps(node, indent=2, default=str))
        return 0
    if args.output == "yaml":
        print(home.node_file.read_text(), end="")
        return 0
    if not gpus:
        print(f"No GPUs ({printable(node.get('inventory', 'unknown inventory'))}).", file=sys.stderr)
    else:
        _print_table(_gpu_table(gpus, _reserved(home), _job_users(home)))
    others = _unmanaged_rows(gpus)
    if len(others) > 1 and args.output == "wide":
        print()
        _print_table(others)
    elif len(others) > 1:
        held = ", ".join(f"GPU {r[0]} pid {r[1]} {r[4]}" for r in others[1:6]) + (" ..." if len(others) > 6 else "")
        print(printable(f"held by processes gflow did not start: {held} (get gpus -o wide)"), file=sys.stderr)
    for line in _node_footer(node):  # on stderr: stdout stays the table that scripts parse
        print(printable(line), file=sys.stderr)
    return 0


def _unmanaged_rows(gpus: list[dict]) -> list[list[str]]:
    """GPU memory held by processes gflow did not start, for an admin to act on: a table with its
    header (only the header when there are none)."""
    from controller.api.units import format_age  # lazy: only when GPUs are listed

    rows = [["GPU", "PID", "USER", "COMMAND", "MEMORY", "UTIL", "AGE"]]
    now = time.time()
    for gpu in gpus:
        for proc in gpu.get("processes") or []:
            if not proc.get("unmanaged"):
                continue
            started, util = proc.get("started"), proc.get("utilization")
            age = "-"
            if started:
                from datetime import datetime  # lazy: as above

                age = format_age(now - datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp())
            rows.append(
                [
                    str(gpu.get("index")),
                    str(proc.get("pid")),
                    str(proc.get("user") or "-"),
                    "(gone: held until a GPU reset)" if proc.get("gone") else str(proc.get("name") or "-"),
                    str(proc.get("usedMemory", "0")),
                    "-" if util is None else f"{util}%",
                    age,
                ]
            )
    return rows


def _node_footer(node: dict) -> list[str]:
    """The CPU cores jobs book with resources.cpus, and what the kernel enforces (cgroups)."""
    lines = []
    cpus = node.get("cpus")
    if isinstance(cpus, dict):
        jobs = cpus.get("jobs") or {}
        held = "; ".join(f"{cores} {name}" for name, cores in jobs.items())
        lines.append(
            f"CPU cores: {cpus.get('free')} free of {cpus.get('total')} ({cpus.get('cores')})"
            + (f"; bound: {held}" if held else "")
        )
    if node.get("limits"):
        lines.append(f"Limits: {node['limits']}")
    return lines
