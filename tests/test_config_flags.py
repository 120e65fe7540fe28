"""gflowd's flag table (controller/api/config_flags.py) is generated from the config model and must
not drift; the settings gflowd builds from it without pydantic are the model's own."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from controller.api.config import ControllerConfig, flag_fields, flag_overrides, load_config
from controller.api.config_flags import DEFAULTS, FLAGS
from controller.api.settings import plain_settings

ROOT = Path(__file__).resolve().parent.parent


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_config_flags", ROOT / "hack" / "gen_config_flags.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()

# a value argparse could hand over for each kind of plain flag
SAMPLES = {"str": "/srv/gflow x", "gpus": [0, 2], "list": ["python", "nvtop"]}


def _dump(value: object) -> object:
    """Settings (namespaces) as model_dump gives the model's: mappings all the way down."""
    if hasattr(value, "__dict__"):
        return {key: _dump(item) for key, item in vars(value).items()}
    return value


def test_committed_table_matches_the_model():
    (rel, text), *more = gen.generate().items()
    assert not more
    assert (ROOT / rel).read_text(encoding="utf-8") == text, (
        f"{rel} is out of date: run python hack/gen_config_flags.py"
    )


def test_table_has_every_flag_of_the_model():
    assert [path for path, *_ in FLAGS] == [path for path, _ in flag_fields()]
    assert ControllerConfig().model_dump() == DEFAULTS


@pytest.mark.e2e
def test_check_mode_passes_on_the_committed_tree():
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen_config_flags.py"), "--check"], capture_output=True, text=True
    )
    assert (result.returncode, result.stderr) == (0, "")


def test_defaults_are_the_models(tmp_path):
    flags = {path: None for path, *_ in FLAGS}
    settings = plain_settings(tmp_path / "config.yaml", flags)
    assert settings is not None
    assert _dump(settings) == load_config(tmp_path / "config.yaml", flag_overrides(flags)).model_dump()
    assert settings.reservations.max_gpus == 1 and settings.slurm.gpu_types == {}


@pytest.mark.parametrize(
    "path, kind, choices", [(path, kind, choices) for path, _, kind, choices, plain in FLAGS if plain]
)
def test_a_plain_flag_gives_what_the_model_gives(tmp_path, path, kind, choices):
    value = choices[-1] if choices else SAMPLES[kind]
    flags = {p: (value if p == path else None) for p, *_ in FLAGS}
    settings = plain_settings(tmp_path / "config.yaml", flags)
    assert settings is not None
    assert _dump(settings) == load_config(tmp_path / "config.yaml", flag_overrides(flags)).model_dump()


def test_which_flags_are_plain():
    """Those whose text the model keeps as argparse gives it; a parsed or bounded one is the model's."""
    plain = {".".join(path) for path, _, _, _, is_plain in FLAGS if is_plain}
    assert {"spec_dir", "fake_gpus", "gpus", "allocation_strategy", "cgroups", "slurm.partition"} <= plain
    assert not {"resync", "metrics_port", "user_quotas", "max_running_cpu_jobs", "reservations.users"} & plain


@pytest.mark.parametrize(
    "setup, flag",
    [
        ("file", ("fake_gpus", "/x")),  # a config file: the model reads and checks it
        ("unreadable", ("fake_gpus", "/x")),  # cannot tell whether it exists: the model says why
        ("none", ("resync", "1s")),  # a duration to parse
        ("none", ("metrics_port", 99999)),  # a bound to check
    ],
)
def test_a_config_file_or_a_checked_flag_goes_to_the_model(tmp_path, setup, flag):
    config_file = tmp_path / "config.yaml"
    if setup == "file":
        config_file.write_text("{}\n")
    elif setup == "unreadable":
        (tmp_path / "file").write_text("")
        config_file = tmp_path / "file" / "config.yaml"  # ENOTDIR, not ENOENT
    flags = {path: None for path, *_ in FLAGS}
    flags[(flag[0],)] = flag[1]
    assert plain_settings(config_file, flags) is None
