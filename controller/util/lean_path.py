"""A path as ``pathlib.Path`` spells and treats it, without importing pathlib, for gflowctl's
``run`` and ``apply``: those verbs are mostly start-up, and pathlib (with ``urllib.parse``,
``ipaddress``, ``fnmatch`` and ``ntpath``) is ~4 ms of their ~40. Their ``Home`` holds
:class:`LeanPath` objects (``Home.locate_lean``), and the functions on their path take them as the
Paths they are typed as.

What a ``LeanPath`` does itself is what run and apply use (``/``, ``name``, ``parent``, ``exists``,
``read_text``, ``mkdir``...), with pathlib's rules, on texts pathlib would spell the same way
(:func:`is_plain`: no ``//``, ``.``, ``..`` or trailing ``/``); a join whose result is not plain gives
a real Path. Any other attribute is a real Path's (pathlib is imported then). Unlike a Path it
equals and orders only other LeanPaths: a Path and a LeanPath of one text are two keys.
"""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False  # not typing's: run's and apply's start-up never imports typing
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

# what pathlib's exists/is_dir/is_file take for "no" (pathlib._IGNORED_ERRNOS); anything else is raised
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def is_plain(text: str) -> bool:
    """``text`` is spelled as pathlib spells it: ``Path(text)`` prints as ``text`` (``.`` too, but
    pathlib holds it as no part at all: its ``name`` is empty)."""
    return text not in ("", ".") and not text.startswith("//") and os.path.normpath(text) == text


def lean(text: str) -> Path:
    """``text`` as a path: a LeanPath when plain, else a real Path. Typed as the Path it stands in for."""
    if is_plain(text):
        return LeanPath(text)  # type: ignore[return-value]  # a Path's stand-in: see the module's docstring
    from pathlib import Path  # lazy: only a path pathlib may spell otherwise

    return Path(text)


class LeanPath:
    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text  # plain (is_plain): callers go through ``lean``

    def __fspath__(self) -> str:
        return self._text

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"LeanPath({self._text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LeanPath) and self._text == other._text

    def __hash__(self) -> int:
        return hash(self._text)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, LeanPath):
            return NotImplemented
        return self._text < other._text

    def __truediv__(self, other: str | os.PathLike[str]) -> Path:
        return lean(os.path.join(self._text, os.fspath(other)))

    def __rtruediv__(self, other: str | os.PathLike[str]) -> Path:
        return lean(os.path.join(os.fspath(other), self._text))

    def __getattr__(self, name: str) -> Any:
        """Whatever else a Path has, from a real one."""
        from pathlib import Path  # lazy: only what run and apply do not use

        return getattr(Path(self._text), name)

    @property
    def name(self) -> str:
        return os.path.basename(self._text)

    @property
    def parent(self) -> Path:
        return lean(os.path.dirname(self._text) or ".")

    @property
    def suffix(self) -> str:
        name = self.name
        at = name.rfind(".")
        return name[at:] if 0 < at < len(name) - 1 else ""

    @property
    def stem(self) -> str:
        name, suffix = self.name, self.suffix
        return name[: -len(suffix)] if suffix else name

    def is_absolute(self) -> bool:
        return self._text.startswith("/")

    def absolute(self) -> Path:
        return self if self.is_absolute() else lean(os.path.join(os.getcwd(), self._text))  # type: ignore[return-value]

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        return os.stat(self._text, follow_symlinks=follow_symlinks)

    def exists(self) -> bool:
        return self._mode() is not None

    def is_dir(self) -> bool:
        mode = self._mode()
        return mode is not None and (mode & 0o170000) == 0o040000

    def is_file(self) -> bool:
        mode = self._mode()
        return mode is not None and (mode & 0o170000) == 0o100000

    def _mode(self) -> int | None:
        try:
            return os.stat(self._text).st_mode
        except OSError as exc:
            if exc.errno not in _ABSENT:
                raise
            return None

    def read_bytes(self) -> bytes:
        with open(self._text, "rb") as handle:
            return handle.read()

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        with open(self._text, encoding=encoding, errors=errors) as handle:
            return handle.read()

    def mkdir(self, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        try:
            os.mkdir(self._text, mode)
        except FileNotFoundError:
            if not parents or self.parent == self:
                raise
            self.parent.mkdir(parents=True, exist_ok=True)
            self.mkdir(mode, parents=False, exist_ok=exist_ok)
        except OSError:
            if not exist_ok or not self.is_dir():  # as pathlib: an existing folder is fine
                raise

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            os.unlink(self._text)
        except FileNotFoundError:
            if not missing_ok:
                raise
