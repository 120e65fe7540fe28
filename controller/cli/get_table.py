"""``gflowctl get jobs`` (the default table, ``-o name``) from gflowd's jobs table alone, and the
quick path to it that builds no ``Home``: the verb users run most is mostly start-up, and ``Home``
is pathlib's (which loads ``urllib.parse`` and ``ipaddress``, ~3-5 ms of the verb's ~30). Anything
this path cannot answer the same way (filters, a home not spelled plainly, a row whose user
gflowd did not know) goes the usual way: ``controller.cli.get``."""

from __future__ import annotations

import sys
import time

from controller.paths import plain_home
from controller.util.jobs_table import COMPLETION, CREATED, DEVICES, GPUS, PHASE, PRIORITY, REASON, UID

RECENT = 24 * 3600  # get jobs without names or -A: active jobs and those that ended in the last day (squeue)
JOB_KINDS = ("jobs", "job", "j")


def quick_get_jobs(home_arg: str | None, args) -> int | None:
    """``get jobs [NAME...] [-A] [-o name]`` as ``controller.cli.get`` prints it, without a Home;
    None when this path cannot answer the same way (the caller takes the usual one)."""
    if args.kind not in JOB_KINDS or args.output not in (None, "name") or args.watch or args.tree:
        return None
    if args.selector or args.phase or args.user or args.me or args.for_object is not None:
        return None
    if any("/" in name for name in args.names):  # job/NAME: the usual path reads (and checks) the types
        return None
    root = plain_home(home_arg)
    if root is None:
        return None
    from controller.client.read.state import read_table_at, uid_users  # lazy: after the cheap checks

    table = read_table_at(f"{root}/run/jobs.table", f"{root}/run/index.json")
    if table is None:
        return None
    chosen, hidden = window(pick(table.rows, table.ordered, args.names), args.names, args.all, args.phase)
    uids = [row[UID] for row in chosen]
    if None in uids:  # its manifest's owner: the usual path stats it
        return None
    missing = [name for name in args.names if name not in table.rows]
    print_rows(chosen, uid_users(uids), args.output, hidden, missing)
    from controller.util.locks import lock_held  # lazy: as above

    if not lock_held(f"{root}/run/gflowd.lock"):  # a stopped gflowd leaves Running rows that no longer run
        sys.stderr.write(f"warning: gflowd is not running for {root}; what you see may be stale\n")
    return print_missing(missing)


def pick(rows: dict[str, tuple], ordered: bool, names: list[str]) -> list[tuple]:
    """The rows asked for by name (in that order), else every row in name order."""
    if names:
        return [row for name in names if (row := rows.get(name)) is not None]
    return list(rows.values()) if ordered else [rows[name] for name in sorted(rows)]


def window(chosen: list[tuple], names: list[str], every: bool, phases: list[str]) -> tuple[list[tuple], int]:
    """Without names, ``-A`` or ``--phase``: only active jobs and those that ended in the last day;
    and how many that hid."""
    if names or every or phases:
        return chosen, 0
    since = time.time() - RECENT
    recent = [row for row in chosen if not row[COMPLETION] or row[COMPLETION] >= since]
    return recent, len(chosen) - len(recent)


def print_rows(chosen: list[tuple], users: list[str], output: str | None, hidden: int, missing: list[str]) -> None:
    """The table (or ``-o name``) of jobs-table rows; ``users``: the USER of each row."""
    if output == "name":
        if chosen:
            sys.stdout.write("".join([f"job/{row[0]}\n" for row in chosen]))
        return
    if not chosen:  # names not found alone: their errors, no header (kubectl)
        if not missing:
            print("No jobs found.", file=sys.stderr)
    else:
        sys.stdout.write("\n".join(format_columns(table_columns(chosen, users))) + "\n")
    if hidden:
        print(f"({hidden} jobs that ended more than a day ago not shown; -A lists them)", file=sys.stderr)


def print_missing(missing: list[str]) -> int:
    """Each name not found, one error line each; the exit code."""
    if missing:
        from controller.cli.common import print_error  # lazy: only on an error

        for name in missing:
            print_error(f"job/{name} not found")
    return 1 if missing else 0


def table_columns(chosen: list[tuple], users: list[str]) -> list[list[str]]:
    """The default table's columns of jobs-table rows (``users``: the USER of each), header first:
    cells read off the rows (a C loop each), ages formatted once per distinct age."""
    from operator import itemgetter  # lazy: already loaded by the interpreter

    from controller.api.units import format_age  # lazy: only a table with rows

    def column(header: str, field: int) -> list[str]:
        return [header, *map(itemgetter(field), chosen)]

    now = time.time()
    seconds = [int(now - created) if created else 0 for created in map(itemgetter(CREATED), chosen)]
    ages = {age: format_age(age) for age in set(seconds)}
    return [
        column("NAME", 0),
        ["USER", *users],
        column("PHASE", PHASE),
        column("GPUS", GPUS),
        column("DEVICES", DEVICES),
        column("PRIORITY", PRIORITY),
        ["AGE", *map(ages.__getitem__, seconds)],
        column("REASON", REASON),
    ]


def format_columns(columns) -> list[str]:
    """Aligned rows of a table given as its columns (header first): each cell but the last
    left-justified to its column's width, three spaces apart, the line's end stripped; a row with a
    cell the terminal would act on has every cell escaped. Loops in C (``%`` formats each row):
    50,000 rows in ~20 ms."""
    if not "".join(["".join(column) for column in columns]).isprintable():
        from controller.cli.common import printable  # lazy: only a table with a cell to escape

        rows = [row if "".join(row).isprintable() else [printable(cell) for cell in row] for row in zip(*columns)]
        columns = list(zip(*rows))
    widths = [max(map(len, column)) for column in columns]
    line = "".join(f"%-{width}s   " for width in widths[:-1]) + "%s"
    return list(map(str.rstrip, map(line.__mod__, zip(*columns))))
