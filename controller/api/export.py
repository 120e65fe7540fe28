"""The submitter's environment a job carries (``gflowctl run --export``, ``Client.submit(export=)``,
``#SBATCH --export``), as sbatch's ``--export``: ``ALL`` (the default: all of it), ``NONE`` (none:
the owner's login basics only), ``VAR,...`` (only those), ``ALL,VAR=val,...`` (all, and these set).

Pure: the environment is handed in. ``run`` keeps the result beside the manifest in a hidden file
only its owner can read (``ENV_FILE``: secrets live in environments); the manifest names it with
the annotation ``ENV_ANNOTATION``, and the job's supervisor reads it as the job's user
(``act/runtime/shim/``). The job's environment is then: login basics < this < ``spec.env``
< gflow's variables (SPEC section 5).

Not carried: what describes the submitting shell or terminal rather than the job (``PWD``,
``SHLVL``, ``TERM``, an ssh connection, an X display), gflow's own variables and a Slurm
allocation's (``SLURM_*``: the job gets its own).
"""

from __future__ import annotations

from collections.abc import Mapping

ENV_ANNOTATION = "gflow.dev/environment"
ENV_FILE = ".{name}.env"  # beside the manifest: hidden files are not manifests (SPEC section 2)
DROPPED = frozenset(
    {
        "_",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "TERM",
        "COLORTERM",
        "TERMCAP",
        "COLUMNS",
        "LINES",
        "WINDOWID",
        "SSH_TTY",
        "SSH_CONNECTION",
        "SSH_CLIENT",
        "SSH_AUTH_SOCK",
        "DISPLAY",
        "XAUTHORITY",
        "XDG_SESSION_ID",
        "XDG_SESSION_TYPE",
        "XDG_SESSION_CLASS",
        "XDG_VTNR",
        "XDG_SEAT",
        "TMUX",
        "TMUX_PANE",
        "STY",
        "CUDA_VISIBLE_DEVICES",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
DROPPED_PREFIXES = ("GFLOW_", "SLURM_", "BASH_FUNC_")


class ExportError(ValueError):
    """A ``--export`` value that does not parse; the message names the fix."""


def exported_env(export: str | None, environ: Mapping[str, str]) -> dict[str, str] | None:
    """What the job carries of ``environ`` for ``--export`` ``export`` (None: ALL); None for NONE."""
    words = [w.strip() for w in ("ALL" if export is None else export).split(",")]
    if any(not w for w in words):
        raise ExportError(f"--export {export!r}: an empty item; use ALL, NONE, VAR,... or ALL,VAR=value,...")
    head = words[0].upper()
    if head == "NONE" and len(words) == 1:
        return None
    everything = head == "ALL"
    env: dict[str, str] = {k: v for k, v in environ.items() if carried(k)} if everything else {}
    bad = []
    for word in words[1:] if everything else words:
        key, eq, value = word.partition("=")
        if not key.isidentifier() or key.upper() in ("ALL", "NONE"):
            bad.append(word)
        elif eq:
            env[key] = value
        elif key in environ:
            env[key] = environ[key]
    if bad:
        raise ExportError(
            f"--export: {', '.join(map(repr, bad))} not a variable name; use ALL, NONE, VAR,... or ALL,VAR=value,..."
        )
    return env


def carried(key: str) -> bool:
    """Whether ``ALL`` carries the variable ``key`` (see the module docstring)."""
    return key not in DROPPED and not key.startswith(DROPPED_PREFIXES) and "=" not in key and "\0" not in key


def encode(env: Mapping[str, str]) -> bytes:
    """The file's bytes: ``KEY=VALUE`` entries ended by NUL, as ``/proc/PID/environ``."""
    return b"".join(f"{k}={v}".encode("utf-8", "surrogateescape") + b"\0" for k, v in env.items() if "\0" not in v)


def without_environment(manifest: dict) -> dict:
    """The manifest as a preview shows it (``run --dry-run -o yaml``, ``Client.preview``): without
    the annotation naming the environment file, which a preview never writes, so that ``apply -f``
    of what it showed runs (with the owner's login basics, as any manifest written by hand) instead
    of failing on a missing file."""
    metadata = {key: value for key, value in manifest["metadata"].items() if key != "annotations"}
    annotations = {
        key: value for key, value in manifest["metadata"].get("annotations", {}).items() if key != ENV_ANNOTATION
    }
    if annotations:
        metadata["annotations"] = annotations
    return {**manifest, "metadata": metadata}
