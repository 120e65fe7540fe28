"""gflowd's flag table (controller/api/config_flags.py) is generated from the config model and must
not drift; the settings gflowd builds from it without pydantic are the model's own."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest

from controller.api.config import ConfigError, ControllerConfig, flag_fields, flag_overrides, load_config
from controller.api.config_flags import DEFAULTS, FLAGS
from controller.api.settings import FlagError, flag_name, plain_settings
from controller.daemon.main import build_parser

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
# texts for each kind of flag the plain path converts or bounds: valid, at and past every bound the
# model has (0, 1, 65535), malformed, negative, too big
TEXTS = {
    "duration": [
        "1s",
        " 90s ",
        "4h30m",
        "1.5",
        "0",
        "0ms",
        "-3",
        "abc",
        "nan",
        "inf",
        "1x",
        "",
        "36501d",
        "3650000000",
    ],
    "quantity": ["2Gi", "512Mi", "1.5G", "0", "10b", "-1", "1Zi", "abc", "", "99999999999Pi", "9223372036854775808"],
    "int": ["0", "1", "-1", "2", "65535", "65536", " 7 ", str(2**70)],
}


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
    "path, kind, choices",
    [(path, kind, choices) for path, _, kind, choices, plain, _ in FLAGS if plain and kind in SAMPLES],
)
def test_a_plain_flag_gives_what_the_model_gives(tmp_path, path, kind, choices):
    value = choices[-1] if choices else SAMPLES[kind]
    flags = {p: (value if p == path else None) for p, *_ in FLAGS}
    settings = plain_settings(tmp_path / "config.yaml", flags)
    assert settings is not None
    assert _dump(settings) == load_config(tmp_path / "config.yaml", flag_overrides(flags)).model_dump()


def test_which_flags_are_plain():
    """Those the model only converts with units.py and bounds, or keeps as argparse gives them; one
    with a validator of its own (quotas) is the model's, as is a nested one with a unit or bound
    (the model's error names config.yaml's key for it, not the flag)."""
    plain = {".".join(path) for path, _, _, _, is_plain, _ in FLAGS if is_plain}
    assert {"spec_dir", "fake_gpus", "gpus", "allocation_strategy", "cgroups", "slurm.partition"} <= plain
    assert {"resync", "unmanaged_memory_threshold", "idle_timeout", "metrics_port", "max_running_cpu_jobs"} <= plain
    assert not {"user_quotas", "reservations.users", "reservations.max_duration", "slurm.gpu_types"} & plain


def _parsed(*argv: str) -> dict[tuple[str, ...], object]:
    """Every flag's value by path, as gflowd's parser hands them to plain_settings and the model."""
    args = build_parser().parse_args(list(argv))
    return {path: getattr(args, ".".join(path)) for path, *_ in FLAGS}


def _plain_or_error(config_file: Path, flags: dict) -> object:
    try:
        settings = plain_settings(config_file, flags)
    except FlagError as exc:
        return str(exc)
    assert settings is not None, "not plain"
    return _dump(settings)


def _model_or_error(config_file: Path, flags: dict) -> object:
    try:
        return load_config(config_file, flag_overrides(flags)).model_dump()
    except ConfigError as exc:
        return str(exc)


@pytest.mark.parametrize(
    "path, text",
    [(path, text) for path, _, kind, _, plain, _ in FLAGS if plain and kind in TEXTS for text in TEXTS[kind]],
    ids=lambda value: ".".join(value) if isinstance(value, tuple) else repr(value),
)
def test_a_converted_or_bounded_flag_gives_what_the_model_gives(tmp_path, path, text):
    """Settings or the one-line error, alike: the table's conversion and bounds are the model's."""
    flags = _parsed(flag_name(path), text)
    assert _plain_or_error(tmp_path / "config.yaml", flags) == _model_or_error(tmp_path / "config.yaml", flags)


def test_every_bad_flag_is_named_at_once_as_by_the_model(tmp_path):
    flags = _parsed("--metrics-port", "70000", "--resync", "soon", "--idle-timeout", "0")
    error = _plain_or_error(tmp_path / "config.yaml", flags)
    assert error == _model_or_error(tmp_path / "config.yaml", flags)
    assert error.startswith("3 errors: --resync: 'soon' is not a duration; use e.g. 90s")  # the model's field order
    assert "--metrics-port: Input should be less than or equal to 65535" in error
    assert "--idle-timeout: Input should be greater than 0" in error


def test_the_test_fixtures_flags_are_plain(tmp_path):
    """tests/conftest.py starts every gflowd with --resync 1s: the e2e suite runs the plain path."""
    settings = plain_settings(tmp_path / "config.yaml", _parsed("--resync", "1s", "--fake-gpus", "/x"))
    assert settings is not None and settings.resync == 1.0


def test_a_quantity_flag_takes_a_unit(tmp_path):
    """--unmanaged-memory-threshold 2Gi, as config.yaml's key takes it (argparse once wanted an int)."""
    flags = _parsed("--unmanaged-memory-threshold", "2Gi")
    settings = plain_settings(tmp_path / "config.yaml", flags)
    assert settings is not None and settings.unmanaged_memory_threshold == 2 * 2**30
    assert load_config(tmp_path / "config.yaml", flag_overrides(flags)).unmanaged_memory_threshold == 2 * 2**30


@pytest.mark.parametrize(
    "setup, flag",
    [
        ("file", ("--fake-gpus", "/x")),  # a config file: the model reads and checks it
        ("file", ("--resync", "abc")),  # ... and reports a flag's error itself
        ("unreadable", ("--fake-gpus", "/x")),  # cannot tell whether it exists: the model says why
        ("none", ("--user-quotas", "alice:4")),  # a validator of the model's own
        ("none", ("--reservations-max-duration", "1h")),  # nested: the model names its key
    ],
)
def test_a_config_file_or_a_checked_flag_goes_to_the_model(tmp_path, setup, flag):
    config_file = tmp_path / "config.yaml"
    if setup == "file":
        config_file.write_text("{}\n")
    elif setup == "unreadable":
        (tmp_path / "file").write_text("")
        config_file = tmp_path / "file" / "config.yaml"  # ENOTDIR, not ENOENT
    assert plain_settings(config_file, _parsed(*flag)) is None


def test_the_generator_keeps_for_the_model_what_it_cannot_repeat():
    """A unit parser plus a bound is plain; another validator, a constraint other than a bound, a
    bound inside a list or a float argparse would hand over as text is the model's."""
    from annotated_types import Ge, Gt, MultipleOf
    from pydantic import AfterValidator

    from controller.api.fields import Duration, Quantity

    assert gen._check(Duration | None, [Gt(0)]) == ("duration", [("gt", 0)])
    assert gen._check(Quantity, [Ge(1)]) == ("quantity", [("ge", 1)])
    for annotation, metadata in [
        (Duration, [AfterValidator(lambda seconds: seconds)]),
        (int, [MultipleOf(2)]),
        (list[Annotated[int, Ge(0)]], []),
        (float, []),
    ]:
        with pytest.raises(gen._NotPlain):
            gen._check(annotation, metadata)
