"""Who may do what (SPEC.md section 8): the spec directory's own permissions, and whose a manifest is.

The spec directory is the only door: a job runs as the owner of its manifest file. A folder anyone
may write to, without the sticky bit, would let any user replace or delete another user's
manifest (and so run or stop jobs in their name), so gflowd refuses to serve one.

Whose a manifest is comes from the file actually read, never from a second look at its path
(docs/multi-user.md, "Manifest identity and symlinks"): :func:`open_manifest` opens the entry once,
and the owner, the parse-cache key and the folder the file really lives in all come from that one
descriptor, so swapping entries between a check and a read gains nothing. A manifest reached
through a symlink (the file's own, or a folder's on the way) is read only when each such symlink
belongs to the file's owner: no one can make gflowd run another user's manifest on their behalf,
nor run it beside their own files.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from collections.abc import Callable
from dataclasses import dataclass

# Reading: never block on a FIFO, never make a terminal ours, never leak into a job.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# Looking: O_PATH names a file without opening it - no device or FIFO is ever opened, and no
# inotify event is made (a cold start looks at every manifest; gflowd's own watcher would
# otherwise hear two events per file). Elsewhere (not Linux) the file is opened for reading.
_O_PATH = getattr(os, "O_PATH", 0)
_LOOK_FLAGS = (_O_PATH or _READ_FLAGS) | os.O_CLOEXEC

NOT_REGULAR = "not a regular file (a FIFO, socket or device): not read"
LEAVES_SPEC_DIR = "a symlink leading outside the spec directory: not followed"
UNRESOLVABLE = "a symlink that cannot be resolved (dangling, or a loop): not read"


def spec_dir_problem(spec_dir: os.PathLike[str] | str) -> str | None:
    """One sentence saying what is unsafe about ``spec_dir`` (and how to fix it), or None."""
    try:
        st = os.stat(spec_dir)
    except OSError as exc:
        return f"cannot read the spec dir {spec_dir}: {exc.strerror}"
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        return (
            f"the spec dir {spec_dir} is world-writable without the sticky bit, so anyone could replace "
            f"or delete other users' manifests; run: chmod o-w {spec_dir} (or chmod +t {spec_dir} to share it)"
        )
    return None


# -- opening a manifest ------------------------------------------------------------------------------


class EntryChanged(Exception):
    """The entry changed while it was being opened (a rename or exchange under way): look again."""


class NotRead(Exception):
    """The entry is not read as a manifest. ``reason``: ``Forbidden`` (the job is Rejected),
    ``Ignored`` (a Warning event), or None (not a manifest at all: nothing to say)."""

    def __init__(self, reason: str | None, message: str = ""):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class OpenedManifest:
    """One manifest file, held by a descriptor: everything known about it comes from that."""

    fd: int  # an O_PATH descriptor (Linux), or one open for reading
    stat: os.stat_result  # fstat of ``fd``: the owner, the size, the parse-cache key
    folder: str | None  # the folder the file really lives in, when a symlink led to it; else None
    path: str  # where it was found

    def read(self, limit: int) -> bytes:
        """The text, from this very file: an O_PATH descriptor is reopened through /proc, which
        names the file itself, never a path that could now lead elsewhere."""
        if not _O_PATH:  # pragma: no cover - not Linux: fd is open for reading
            return _read_fd(self.fd, limit)
        try:
            fd = os.open(f"/proc/self/fd/{self.fd}", _READ_FLAGS)
        except FileNotFoundError:  # no /proc: open the resolved path, and check it is the same file
            fd = os.open(os.path.realpath(self.path), _READ_FLAGS | os.O_NOFOLLOW)
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (self.stat.st_dev, self.stat.st_ino):
                os.close(fd)
                raise EntryChanged(self.path) from None
        try:
            return _read_fd(fd, limit)
        finally:
            os.close(fd)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> OpenedManifest:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _read_fd(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


@dataclass
class Folder:
    """A folder of the spec dir, held open while its entries are read: an entry opened relative to
    it is in it, whatever happens to the path that led here meanwhile."""

    fd: int
    path: str  # as the walk found it, under the spec dir
    real: str | None  # its real path, when symlinks led to it; else None (its path is its real one)
    links: tuple[tuple[str, int], ...]  # the symlinks on the way to it, with their owners
    stat: os.stat_result

    def close(self) -> None:
        os.close(self.fd)


@dataclass(frozen=True)
class SpecTree:
    """Opens what is in the spec dir ``path`` (absolute; ``real`` is its realpath) the safe way.
    ``display`` turns a path under it into what users see. Every method raises :class:`NotRead`
    for an entry not to be read, :class:`EntryChanged` for one that changed under us (a later
    look decides), and ``OSError`` for the file itself (gone, unreadable)."""

    path: str
    real: str
    display: Callable[[str], str]

    def open_folder(self, path: str) -> Folder:
        """A folder named by its path (the spec dir, or one a file event names)."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            real, links = self._resolved(fd, path, st)
            return Folder(fd, path, real, links, st)
        except BaseException:
            os.close(fd)
            raise

    def open_subfolder(self, parent: Folder, name: str) -> Folder | None:
        """The real folder ``name`` in ``parent``; None when it is a symlink (walked by path later)."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None
            raise
        real = None if parent.real is None else os.path.join(parent.real, name)
        return Folder(fd, os.path.join(parent.path, name), real, parent.links, os.fstat(fd))

    def open_entry(self, folder: Folder, name: str, path: str) -> OpenedManifest:
        """The manifest ``name`` (at ``path``) in an open folder: the walk's way, no path is resolved again."""
        looked = _look_at(name, folder.fd)
        if looked is None:
            return self.open_manifest(path)  # a symlink: resolved by path
        real = None if folder.real is None else os.path.join(folder.real, name)
        return self._checked(*looked, path, lambda: (real, folder.links))

    def open_manifest(self, path: str) -> OpenedManifest:
        """The manifest at ``path``: a symlink is resolved without opening what it names, and
        whatever it led to is what is read."""
        looked = _look_at(path)
        if looked is None:
            fd = self._through_symlink(path)
            looked = fd, os.fstat(fd)
        fd, st = looked
        return self._checked(fd, st, path, lambda: self._resolved(fd, path, st))

    def _through_symlink(self, path: str) -> int:
        try:
            fd = os.open(path, _LOOK_FLAGS) if _O_PATH else _open_followed_elsewhere(path, self.real)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                if not os.path.islink(path):
                    raise EntryChanged(path) from None
                raise NotRead("Ignored", UNRESOLVABLE) from None
            raise
        try:
            if not _inside(_real_path(fd, path, os.fstat(fd)), self.real):
                raise NotRead("Ignored", LEAVES_SPEC_DIR)
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _checked(
        self, fd: int, st: os.stat_result, path: str, resolve: Callable[[], tuple[str | None, tuple]]
    ) -> OpenedManifest:
        """The file is a regular one, and every symlink on the way to it is its owner's."""
        try:
            if not stat.S_ISREG(st.st_mode):
                raise NotRead("Ignored", NOT_REGULAR)
            real, links = resolve()
            for link, owner in links:
                if owner != st.st_uid:
                    assert real is not None  # a link on the way means the path resolved
                    target = self.path + real[len(self.real) :]
                    raise NotRead("Forbidden", _foreign_symlink(path, link, owner, target, st.st_uid, self.display))
            return OpenedManifest(fd, st, None if real is None else os.path.dirname(real), path)
        except BaseException:
            os.close(fd)
            raise

    def _resolved(self, fd: int, path: str, st: os.stat_result) -> tuple[str | None, tuple[tuple[str, int], ...]]:
        """(the real path, when symlinks led to it, else None; those symlinks with their owners)."""
        real = _real_path(fd, path, st)
        if real == self.real + path[len(self.path) :]:
            return None, ()
        if real != self.real and not _inside(real, self.real):
            raise NotRead(None)  # a folder on the way leaves the spec dir: not ours to look at
        links = _symlinks_on_the_way(path, self.path)
        if not links:
            raise EntryChanged(path)  # the descriptor came through a symlink that is gone now
        return real, tuple(links)


def _look_at(name: str, dir_fd: int | None = None) -> tuple[int, os.stat_result] | None:
    """A descriptor of the entry itself and its fstat; None when the entry is a symlink."""
    try:
        fd = os.open(name, _LOOK_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # pragma: no cover - without O_PATH a symlink is not opened itself
            return None
        raise
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if stat.S_ISLNK(st.st_mode):
        os.close(fd)
        return None
    return fd, st


def _open_followed_elsewhere(path: str, real_spec_dir: str) -> int:  # pragma: no cover - not Linux
    """Without O_PATH: check where the symlink leads before opening what it names."""
    real = os.path.realpath(path)
    if not _inside(real, real_spec_dir):
        raise NotRead("Ignored", LEAVES_SPEC_DIR)
    return os.open(real, _READ_FLAGS | os.O_NOFOLLOW)


def _real_path(fd: int, path: str, st: os.stat_result) -> str:
    """Where the open file lives now, from the descriptor itself (Linux's /proc/self/fd); elsewhere
    the resolved path, accepted only if it still names this very file."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    try:
        real = os.path.realpath(path)
        again = os.stat(real)
    except OSError:
        raise EntryChanged(path) from None
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
        raise EntryChanged(path)
    return real


def _inside(real: str, real_spec_dir: str) -> bool:
    return real.startswith(real_spec_dir + os.sep)


def _symlinks_on_the_way(path: str, spec_dir: str) -> list[tuple[str, int]]:
    """Every symlink between the spec dir and ``path`` (folders and the file itself), with its owner."""
    found: list[tuple[str, int]] = []
    here = spec_dir
    for part in path[len(spec_dir) :].strip(os.sep).split(os.sep):
        here = os.path.join(here, part)
        try:
            st = os.lstat(here)
        except OSError:
            raise EntryChanged(path) from None
        if stat.S_ISLNK(st.st_mode):
            found.append((here, st.st_uid))
    return found


def _foreign_symlink(
    path: str, link: str, link_owner: int, target: str, owner: int, display: Callable[[str], str]
) -> str:
    link_text = f"a symlink owned by {user_name(link_owner)}"
    what = f"is {link_text}" if link == path else f"is reached through {display(link)}, {link_text},"
    return (
        f"{display(path)} {what} to {display(target)}, owned by {user_name(owner)}: "
        "gflowd runs a manifest only as its owner and never on another user's behalf; "
        "copy the file instead, or have its owner make the link"
    )


def user_name(uid: int) -> str:
    """The name of a file owner's uid (``uid 1234`` when the system has no name for it)."""
    if uid < 0:
        return "unknown"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
