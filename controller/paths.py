"""Where things live: the ``GFLOW_HOME`` layout (SPEC.md section 2). No I/O beyond mkdir."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing's: gflowctl's run and apply never import typing
if TYPE_CHECKING:
    from pathlib import Path

MANIFEST_SUFFIXES = (".yaml", ".yml")


def is_manifest_name(filename: str) -> bool:
    """Manifests are ``*.yaml``/``*.yml``; hidden files and editor leftovers are not."""
    if filename.startswith(".") or filename.endswith("~") or filename.startswith("#"):
        return False
    return filename.endswith(MANIFEST_SUFFIXES)


def default_home() -> Path:
    from pathlib import Path  # lazy: Home.locate_lean's homes are pathlib's only where they must be

    if os.environ.get("GFLOW_HOME"):
        return Path(os.environ["GFLOW_HOME"]).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "gflow"


def plain_home(home_arg: str | None) -> str | None:
    """The home's folder as ``Home.resolve`` spells it (``--home``, else ``$GFLOW_HOME``, else
    ``$XDG_DATA_HOME/gflow`` or ``~/.local/share/gflow``; absolute), or None when pathlib might
    spell it otherwise (``..``, ``//``, a trailing slash, ``~user``): ``Home.resolve`` reads those."""
    given = home_arg or os.environ.get("GFLOW_HOME")
    if given and given.startswith("~") and not given.startswith("~/"):
        return None  # ~user: pathlib's rules
    if given:
        root = os.path.expanduser(given)
    else:
        data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
        root = os.path.join(data, "gflow")
    root = _absolute(root)
    return root if root.startswith("/") and not root.startswith("//") and os.path.normpath(root) == root else None


def _absolute(text: str) -> str:
    return text if text.startswith("/") else os.path.join(os.getcwd(), text)


class UnsafeName(ValueError):
    """A name that would put a file outside its folder (``../x``, ``a/b``)."""


def _plain(name: str) -> str:
    """A job name as one path component. Admission only lets DNS-1123 names through; this is the
    last line of defence, so that no name can ever put a status or log file outside its folder."""
    if not name or "/" in name or "\0" in name or name.startswith("."):
        raise UnsafeName(f"{name!r} is not a job name (a job name is one word of a-z, 0-9 and '-')")
    return name


class Home:
    """One gflow instance: its home folder and the spec dir it watches. Immutable; a plain class,
    not a dataclass, since every gflowctl verb imports this module and ``dataclasses`` costs ~5 ms
    of start-up (it loads ``inspect``)."""

    __slots__ = ("_display_bases", "root", "spec_dir")
    root: Path
    spec_dir: Path
    _display_bases: tuple[str, ...]

    def __init__(self, root: Path, spec_dir: Path) -> None:
        object.__setattr__(self, "root", root)
        object.__setattr__(self, "spec_dir", spec_dir)
        # what ``display`` strips, as "folder/" strings, once: it runs for every manifest at a start
        bases = tuple(f"{base}/" for base in (str(root), str(spec_dir.parent)) if base != "/")
        object.__setattr__(self, "_display_bases", bases)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Home is immutable: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Home) and (self.root, self.spec_dir) == (other.root, other.spec_dir)

    def __hash__(self) -> int:
        return hash((self.root, self.spec_dir))

    def __repr__(self) -> str:
        return f"Home(root={self.root!r}, spec_dir={self.spec_dir!r})"

    @classmethod
    def resolve(
        cls, home: str | os.PathLike[str] | None = None, spec_dir: str | os.PathLike[str] | None = None
    ) -> Home:
        from pathlib import Path  # lazy: see locate_lean

        root = Path(home).expanduser() if home else default_home()
        root = root.absolute()
        spec = Path(spec_dir).expanduser().absolute() if spec_dir else root / "jobs"
        return cls(root=root, spec_dir=spec)

    @classmethod
    def locate(cls, home: str | os.PathLike[str] | None = None, spec_dir: str | os.PathLike[str] | None = None) -> Home:
        """The instance gflowctl and the Python client act on: as ``resolve``, and without a
        ``spec_dir`` the one a running (or the last) gflowd watches, e.g. a git checkout."""
        resolved = cls.resolve(home, spec_dir)
        if spec_dir is None:
            try:
                recorded = resolved.spec_dir_file.read_text().strip()
            except OSError:
                recorded = ""
            if recorded:
                from pathlib import Path  # lazy: see locate_lean

                resolved = cls(resolved.root, Path(recorded))
        return resolved

    @classmethod
    def locate_lean(cls, home: str | None = None, spec_dir: str | None = None) -> Home:
        """As ``locate``, its folders LeanPaths when each is spelled plainly (``plain_home``,
        ``lean_path.is_plain``), so that run and apply never import pathlib; else ``locate``'s."""
        root = plain_home(home)
        if root is None or (spec_dir is not None and spec_dir.startswith("~") and not spec_dir.startswith("~/")):
            return cls.locate(home, spec_dir)  # ~user: pathlib's rules
        spec = spec_dir if spec_dir is None else _absolute(os.path.expanduser(spec_dir))
        if spec is None:
            try:
                with open(os.path.join(root, "run", "spec-dir")) as handle:
                    spec = handle.read().strip() or None
            except OSError:
                spec = None
        spec = os.path.join(root, "jobs") if spec is None else spec
        from controller.util.lean_path import is_plain, lean  # lazy: only run and apply build lean homes

        if not is_plain(spec):
            return cls.locate(home, spec_dir)
        return cls(lean(root), lean(spec))

    @property
    def status_dir(self) -> Path:
        return self.root / "status"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def node_file(self) -> Path:
        return self.root / "node.yaml"

    @property
    def events_file(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def config_file(self) -> Path:
        return self.root / "config.yaml"

    @property
    def cordon_file(self) -> Path:
        """GPUs an admin cordoned or drained (``gflowctl cordon|drain gpu N``)."""
        return self.root / "cordon.yaml"

    @property
    def index_file(self) -> Path:
        """A JSON summary of every job, so ``gflowctl get jobs`` reads one file."""
        return self.run_dir / "index.json"

    @property
    def review_socket(self) -> Path:
        """The admission review for every user (daemon/review.py)."""
        return self.run_dir / "review.sock"

    @property
    def review_dir(self) -> Path:
        """Admission review requests from gflowctl, answered by gflowd (daemon/review.py)."""
        return self.run_dir / "review"

    @property
    def history_file(self) -> Path:
        """Written by gflowd: one line per finished attempt (``gflowctl stats`` reads it)."""
        return self.run_dir / "history.jsonl"

    @property
    def gpu_usage_file(self) -> Path:
        """Running attempts' GPU usage samples (written by gflowd, read by ``gflowctl top``)."""
        return self.run_dir / "gpu-usage.json"

    @property
    def lock_file(self) -> Path:
        return self.run_dir / "gflowd.lock"

    @property
    def spec_dir_file(self) -> Path:
        """Written by gflowd: which spec dir it watches, so gflowctl finds a custom --spec-dir."""
        return self.run_dir / "spec-dir"

    @property
    def web_file(self) -> Path:
        """Written by gflowd while its web dashboard serves: the URL (a ``--web-port 0`` port)."""
        return self.run_dir / "web.json"

    @property
    def web_socket(self) -> Path:
        """The dashboard on a Unix socket: the same pages, and the kernel names each viewer."""
        return self.run_dir / "web.sock"

    def control_dir(self, uid: int) -> Path:
        """The job supervisors' control sockets (attach, exec) for jobs running as ``uid``: 0700, its."""
        return self.run_dir / "control" / str(uid)

    def control_socket(self, uid: int, name: str) -> Path:
        return self.control_dir(uid) / f"{_plain(name)}.sock"

    @property
    def functions_dir(self) -> Path:
        """Written by the Python client: ``<job>/`` per function job (pickled call, its result)."""
        return self.root / "functions"

    def status_file(self, name: str) -> Path:
        return self.status_dir / f"{_plain(name)}.yaml"

    @property
    def records_journal(self) -> Path:
        """Written by gflowd: finished jobs' records in one file, for a fast restart and
        ``get -o json`` (controller/util/records_journal.py; a cache of the status files)."""
        return self.run_dir / "records.journal"

    @property
    def jobs_table(self) -> Path:
        """Written by gflowd: the rows ``gflowctl get jobs`` prints, one per job, in one file
        (controller/util/jobs_table.py; a cache of the status files)."""
        return self.run_dir / "jobs.table"

    @property
    def status_json_journal(self) -> Path:
        """Written by gflowd: every status file written, as ``get -o json`` prints it (a records
        journal of JSON texts, controller/util/records_journal.py; a cache of the status files)."""
        return self.run_dir / "status-json.journal"

    def log_file(self, name: str, attempt: int | None = None) -> Path:
        name = _plain(name)
        return self.logs_dir / (f"{name}.log" if attempt is None else f"{name}.{attempt}.log")

    def display(self, path: Path | str) -> str:
        """A path as users see it in messages: relative to the home (``jobs/a.yaml``) when inside it,
        else relative to the spec dir's parent. Takes a plain string too: a start shows 50,000
        manifests' paths, and building a Path for each costs more than the answer."""
        text = path if isinstance(path, str) else str(path)
        for base in self._display_bases:
            if text.startswith(base) and "/." not in text and "//" not in text and text[-1] != "/":
                return text[len(base) :]
        from pathlib import Path  # lazy: only a path outside the home's plain prefixes

        for folder in (self.root, self.spec_dir.parent):
            try:
                return str(Path(path).relative_to(folder))
            except ValueError:
                continue
        return text

    def ensure(self) -> None:
        for directory in (self.root, self.spec_dir, self.status_dir, self.logs_dir, self.run_dir):
            directory.mkdir(parents=True, exist_ok=True)
        # logs hold job output: readable by owners, never world-writable
        os.chmod(self.run_dir, 0o755)
