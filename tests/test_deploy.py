"""The systemd units in manifests/deploy/: they parse (``systemd-analyze verify`` where systemd is
installed, a structural check always), start the real ``gflowd`` entry point with flags gflowd
accepts, and never kill jobs on stop."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
UNITS = {"gflowd.service": "default.target", "gflowd-system.service": "multi-user.target"}


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd's INI dialect: sections, repeated keys, comments, backslash continuations."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"key outside a section: {line!r}"
        assert "=" in line, f"not key=value: {line!r}"
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


@pytest.mark.parametrize("name", sorted(UNITS))
def test_unit_structure_and_entry_point(name):
    unit = parse_unit((REPO / "manifests" / "deploy" / name).read_text())
    assert set(unit) == {"Unit", "Service", "Install"}
    service = unit["Service"]
    # jobs and their supervisors live in gflowd's delegated scope (systemd_scope), not in the unit:
    # a stop kills only gflowd and its helpers, and the unit needs no Delegate= of its own
    assert service["KillMode"] == ["control-group"]
    assert "Delegate" not in service
    assert service["Restart"] == ["on-failure"]
    assert unit["Install"]["WantedBy"] == [UNITS[name]]
    assert any(env.startswith("GFLOW_HOME=") for env in service["Environment"])
    [exec_start] = service["ExecStart"]
    argv = shlex.split(exec_start)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert Path(argv[0]).name in scripts and scripts[Path(argv[0]).name] == "controller.daemon.main:main"
    from controller.daemon.main import build_parser

    build_parser().parse_args(argv[1:])  # every flag it passes is one gflowd has (exits otherwise)


def documentation_of(name: str) -> list[str]:
    unit = parse_unit((REPO / "manifests" / "deploy" / name).read_text())
    return [uri for value in unit["Unit"].get("Documentation", []) for uri in value.split()]


@pytest.mark.parametrize("name", sorted(UNITS))
def test_documentation_names_only_urls_and_man_pages_not_files_nothing_installs(name):
    """``systemctl help`` opens Documentation=; a file: URI names a file no install step puts
    there (pip installs no docs), so only web pages and man pages are listed."""
    uris = documentation_of(name)
    assert uris, "the unit says where to read about it"
    bad = [uri for uri in uris if not uri.startswith(("https://", "man:"))]
    assert not bad, f"{name}: Documentation= {bad}: use a https:// URL or an installed man page"


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed here")
@pytest.mark.parametrize("name", sorted(UNITS))
def test_every_man_page_the_units_name_is_installed(name):
    pages = [uri.removeprefix("man:") for uri in documentation_of(name) if uri.startswith("man:")]
    for page in pages:
        title, section = page.rstrip(")").split("(")
        result = subprocess.run(["man", "-w", section, title], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and result.stdout.strip(), f"{name}: man:{page} is not installed"


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
@pytest.mark.parametrize("name", sorted(UNITS))
def test_systemd_analyze_verify_finds_nothing_to_say(name, tmp_path):
    gflowd = Path(sys.executable).parent / "gflowd"
    assert gflowd.exists(), "the package's gflowd entry point is installed next to this python"
    text = (REPO / "manifests" / "deploy" / name).read_text()
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    binary = shlex.split(exec_start.split("=", 1)[1])[0]
    copy = tmp_path / name  # the installed path does not exist here: point it at this checkout's
    copy.write_text(text.replace(f"ExecStart={binary}", f"ExecStart={gflowd}"))
    result = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    about_ours = [line for line in (result.stdout + result.stderr).splitlines() if name in line]
    assert result.returncode == 0 and not about_ours, result.stdout + result.stderr


@pytest.mark.e2e
def test_verify_would_catch_a_bad_unit(tmp_path):
    """The check above can fail: systemd-analyze names our file for an invalid setting."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here")
    bad = tmp_path / "bad.service"
    bad.write_text(f"[Service]\nExecStart={Path(sys.executable).parent / 'gflowd'}\nKillMode=bogus\n")
    result = subprocess.run(["systemd-analyze", "verify", str(bad)], capture_output=True, text=True, timeout=60)
    assert any("bad.service" in line for line in (result.stdout + result.stderr).splitlines())
