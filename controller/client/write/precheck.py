"""Submit-time checks of what a job will run (``gflowctl run``, ``Client.submit``): mistakes that
would otherwise show only once a GPU frees, hours later. Run by the submitter, so every look is
made as the job's own user, with the PATH the job will have (the submitter's, when ``--export``
carries it; with the login PATH gflowd gives, a program without a path is its supervisor's to find).
``--no-check`` (``check=False``) skips them.

Refused, each with the fix: a program given with a path that does not exist or cannot be executed;
a program not on the job's PATH; a file without ``#!`` that looks like Python, given as the program
(the kernel cannot exec it) or as the script (bash would run it); a file an interpreter is given
(``python3 trian.py``) that does not exist.
"""

from __future__ import annotations

import os
import re

_PYTHON_LINE = r"^(import \w|from [\w.]+ import |def \w+\(|class \w+[:(]|if __name__ == )"  # compiled on first use


def check_program(argv: list[str], workdir: str, path: str | None, path_is: str = "") -> str | None:
    """Why ``argv`` cannot start in ``workdir`` with ``PATH=path`` (``path_is``: whose PATH, for the
    message), with the fix; None if it can."""
    program = argv[0]
    if "{" in program:  # a sweep's placeholder: each child's differs
        return None
    if os.sep not in program:
        if path is None:  # the login PATH: the job's supervisor looks
            return None
        if _which(program, path) is None:
            return _not_on_path(program, argv, workdir, path_is or f"PATH={path}")
        return _interpreted_file(argv, workdir)
    where = os.path.join(workdir, os.path.expanduser(program))
    if not os.path.exists(where):
        near = _near(program, workdir)
        return f"{program}: no such file in {workdir}" + (f"; did you mean {near}?" if near else "")
    if os.path.isdir(where):
        return f"{program} is a folder, not a program"
    if not os.access(where, os.X_OK):
        import shlex  # lazy: only this message quotes

        hint = f"-- python3 {_args(argv)}" if looks_like_python(where) else f"-- bash {_args(argv)}"
        return f"{program} is not executable: chmod +x {shlex.quote(program)}, or did you mean: {hint}"
    if _without_shebang(where) and looks_like_python(where):
        return f"{program} has no #! line and looks like Python: did you mean: -- python3 {_args(argv)}"
    return None


def check_script(script_path: str, args: list[str]) -> str | None:
    """``run SCRIPT`` runs a script without ``#!`` with bash: refused when it looks like Python."""
    if _without_shebang(script_path) and looks_like_python(script_path):
        shown = _args([script_path, *args])
        return f"{script_path} has no #! line and looks like Python (bash would run it): did you mean: gflowctl run -- python3 {shown}"
    return None


_INTERPRETERS = re.compile(r"^(python[\d.]*|bash|sh|zsh|Rscript|julia|perl|ruby|node)$")


def _interpreted_file(argv: list[str], workdir: str) -> str | None:
    """``python3 trian.py``: the file an interpreter is given (its first argument) must exist."""
    if len(argv) < 2 or not _INTERPRETERS.match(argv[0]) or argv[1].startswith("-") or "{" in argv[1]:
        return None
    where = os.path.join(workdir, os.path.expanduser(argv[1]))
    if os.path.exists(where):
        return None
    near = _near(argv[1], workdir)
    return f"{argv[1]}: no such file in {workdir}" + (
        f"; did you mean: -- {_args([argv[0], near, *argv[2:]])}" if near else ""
    )


def looks_like_python(path: str) -> bool:
    if path.endswith(".py"):
        return True
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return any(re.match(_PYTHON_LINE, line) for line in head.splitlines())


def job_path(environment: dict[str, str] | None, spec_env: dict[str, str]) -> tuple[str | None, str]:
    """The PATH the job will have, and whose it is: ``-e PATH=``, else the submitter's carried
    one; None when it is the login PATH gflowd gives (``act/runtime/login.py``, which the client
    does not load): then only a program given with a path is looked at."""
    if "PATH" in spec_env:
        return spec_env["PATH"], "-e PATH"
    if environment is not None and "PATH" in environment:
        return environment["PATH"], "yours, as --export carries it"
    return None, ""


def _not_on_path(program: str, argv: list[str], workdir: str, path_is: str) -> str:
    text = f"{program}: not found on the job's PATH ({path_is})"
    local = os.path.join(workdir, program)
    found = program if os.path.isfile(local) else _near(program, workdir)
    if found is None:
        return text
    rest = _args([found, *argv[1:]])
    where = os.path.join(workdir, found)
    if looks_like_python(where) and (_without_shebang(where) or not os.access(where, os.X_OK)):
        return f"{text}; did you mean: -- python3 {rest}"
    return f"{text}; did you mean: -- ./{rest}"


def _near(program: str, workdir: str) -> str | None:
    """A file of ``workdir`` whose name is close to ``program``'s (a typo)."""
    folder, name = os.path.split(program)
    try:
        names = os.listdir(os.path.join(workdir, os.path.expanduser(folder)))
    except OSError:
        return None
    from difflib import get_close_matches  # lazy: only a program that is not there

    close = get_close_matches(name, names, n=1, cutoff=0.75)
    return os.path.join(folder, close[0]) if close else None


def _which(program: str, path: str) -> str | None:
    """``shutil.which(program, path=path)`` for a name without a folder: the first entry of
    ``path`` holding an executable file of that name. Written out: shutil (with bz2 and lzma)
    costs ``gflowctl run`` ~2 ms to import, for this one loop."""
    if not path:
        return None
    for folder in dict.fromkeys(path.split(os.pathsep)):
        where = os.path.join(folder, program)
        if os.path.exists(where) and os.access(where, os.F_OK | os.X_OK) and not os.path.isdir(where):
            return where
    return None


def _without_shebang(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(2) != b"#!"
    except OSError:
        return False


def _args(argv: list[str]) -> str:
    import shlex  # lazy: only a message quotes

    return " ".join(shlex.quote(a) for a in argv)
