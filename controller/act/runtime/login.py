"""A job's base environment: its owner's login basics, never gflowd's own environment.

gflowd often runs as root from a unit or a shell whose variables are nobody else's business (an
admin's pyenv, tokens in ``Environment=``, ``SLURM_*`` of the allocation it runs in). A job gets
what ``login``/``su -`` would give its owner instead: HOME, USER, LOGNAME and SHELL from the
password database, PATH from ``/etc/login.defs`` (``ENV_SUPATH`` for root, ``ENV_PATH`` for
others; the usual defaults when unset), the system locale (``/etc/default/locale`` or
``/etc/locale.conf``: LANG, LANGUAGE, LC_*), TERM for a tty job, and the machine's TZ. The
manifest's ``env`` and gflow's own variables come on top (``api/jobenv.py``). The same rule holds
for the jobs of gflowd's own user.

``login_env`` is pure (the files' text is handed in); ``system_files`` reads them, once per
gflowd: they change when an admin edits them, which a restart picks up.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

USER_PATH = "/usr/local/bin:/usr/bin:/bin"
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOCALE_KEYS = (
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_NUMERIC",
    "LC_TIME",
    "LC_COLLATE",
    "LC_MONETARY",
    "LC_MESSAGES",
    "LC_PAPER",
    "LC_NAME",
    "LC_ADDRESS",
    "LC_TELEPHONE",
    "LC_MEASUREMENT",
    "LC_IDENTIFICATION",
)
TTY_TERM = "xterm-256color"  # what attach's terminals (and most others) understand
LOGIN_DEFS = "/etc/login.defs"
LOCALE_FILES = ("/etc/default/locale", "/etc/locale.conf")


@dataclass(frozen=True)
class Account:
    """The fields of a passwd entry a login uses."""

    uid: int
    name: str
    home: str
    shell: str


@dataclass(frozen=True)
class SystemFiles:
    """The text of the files a login reads ("" when missing), and the machine's TZ (gflowd's)."""

    login_defs: str = ""
    locale: str = ""
    tz: str | None = None


def login_env(account: Account, files: SystemFiles, tty: bool = False) -> dict[str, str]:
    """The environment a login of ``account`` starts with (see the module docstring)."""
    settings = _login_defs(files.login_defs)
    key, default = ("ENV_SUPATH", ROOT_PATH) if account.uid == 0 else ("ENV_PATH", USER_PATH)
    path = settings.get(key, "")
    path = path[len("PATH=") :] if path.startswith("PATH=") else path
    env = {
        "HOME": account.home or "/",
        "USER": account.name,
        "LOGNAME": account.name,
        "SHELL": account.shell or "/bin/sh",
        "PATH": path or default,
    }
    locale = _assignments(files.locale)
    env.update({k: v for k, v in locale.items() if k in LOCALE_KEYS and v})
    if tty:
        env["TERM"] = TTY_TERM
    if files.tz:
        env["TZ"] = files.tz
    return env


def account_of(entry) -> Account:
    """An ``Account`` from a ``pwd.struct_passwd``."""
    return Account(entry.pw_uid, entry.pw_name, entry.pw_dir, entry.pw_shell)


def system_files(tz: str | None = None) -> SystemFiles:
    """The login files of this machine as they are now (``tz``: gflowd's TZ, if any)."""
    locale = ""
    for candidate in LOCALE_FILES:
        locale = _read(candidate)
        if locale:
            break
    return SystemFiles(_read(LOGIN_DEFS), locale, tz)


@lru_cache(maxsize=4)  # the same file text for every job: parsing 12 kB per launch was ~0.5 ms of gflowd's loop
def _login_defs(text: str) -> dict[str, str]:
    """``KEY VALUE`` lines of login.defs (comments and blank lines skipped). Shared: read, never change."""
    found = {}
    for line in text.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and not parts[0].startswith("#"):
            found[parts[0]] = parts[1].strip()
    return found


@lru_cache(maxsize=4)
def _assignments(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines (``export`` and quotes allowed), as /etc/default/locale holds them.
    Shared: read, never change."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export ") :].strip()
        key, sep, value = line.partition("=")
        if not sep or key.startswith("#") or not key.isidentifier():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        found[key] = value
    return found


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(1 << 16)
    except OSError:
        return ""
