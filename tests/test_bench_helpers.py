"""hack/bench.py's figure names and hack/bench/churn_disk.py, in-process (the benches themselves run
real daemons and are run by hand: docs/performance.md)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclass-free, but annotations name the module's own classes
    spec.loader.exec_module(module)
    return module


bench = _load("gflow_bench_script", ROOT / "hack" / "bench.py")
churn_disk = _load("churn_disk", ROOT / "hack" / "bench" / "churn_disk.py")


def test_every_new_figure_answers_to_only_by_its_key():
    for name in (
        "drain_jobs_per_s_churned",
        "cold_start_pending_7k_s",
        "cold_start_pending_7k_s_again",
        "get_jobs_ms_50k",
        "apply_to_running_ms_p99",
    ):
        assert bench.key_of(name) in bench.KEYS, name


def test_every_target_belongs_to_a_figure_only_can_select():
    gflow_ratios = {name for name in bench.TARGETS if name.startswith("gflow_")}
    for name in set(bench.TARGETS) - gflow_ratios:
        assert bench.key_of(name) in bench.KEYS, name
    assert "gflow" in bench.KEYS  # --only gflow: the side-by-side figures


def test_the_churned_drain_holds_the_target_and_the_settled_one_none():
    assert bench.TARGETS["drain_jobs_per_s_churned"] == (">=", 500)
    assert bench.TARGETS.get("drain_jobs_per_s") is None


def test_churn_creates_then_deletes_every_file_and_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    (tmp_path / "kept").write_text("x")
    created = []
    real_open = os.open

    def counting_open(path, flags, *args, **kwargs):  # shutil.rmtree passes dir_fd=
        if flags & os.O_CREAT:
            created.append(os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(churn_disk.os, "open", counting_open)
    took = churn_disk.churn(tmp_path, 500)
    assert took > 0
    assert len(created) == 500 and len(set(created)) == 500
    assert [path for path in created if os.path.exists(path)] == []
    assert sorted(os.listdir(tmp_path)) == ["kept"]


def test_create_cost_is_measured_in_a_folder_it_removes(tmp_path):
    assert churn_disk.create_us(tmp_path, 30) > 0
    assert os.listdir(tmp_path) == []


def test_the_bench_removes_the_cgroup_groups_gflowd_made_for_its_homes(tmp_path):
    from helpers import home_cgroups

    from controller.act.runtime.backends.local.attempt_cgroups import cgroup_group
    from controller.act.runtime.cgroups import probe

    bases = [base for base in probe().dirs.values() if os.access(base, os.W_OK)]
    if os.geteuid() != 0 or not bases:
        import pytest

        pytest.skip("needs root and a writable cgroup hierarchy")
    home = tmp_path / "drain"
    home.mkdir()
    made = os.path.join(bases[0], cgroup_group(home), "blocker-1")  # as gflowd leaves it
    os.makedirs(made)
    try:
        assert bench.remove_cgroups_of(tmp_path) == []
        assert home_cgroups(home) == []
    finally:
        for path in (made, os.path.dirname(made)):
            if os.path.isdir(path):
                os.rmdir(path)


def test_a_cold_start_ends_when_the_ready_index_landed_not_when_the_bench_parsed_it(tmp_path):
    home = tmp_path / "home"
    (home / "run").mkdir(parents=True)
    index = home / "run" / "index.json"
    index.write_text('{"controller":{"pid":1},"jobs":{"a":{"phase":"Succeeded"}}}')
    landed_ns = 1_700_000_000_000_000_000
    os.utime(index, ns=(landed_ns, landed_ns))
    assert bench.index_phases(home) == {"Succeeded": 1}
    assert bench.parsed_index_landed(home) == landed_ns / 1e9
    t0 = landed_ns / 1e9 - 1.25
    assert abs(bench._landed_or(home, t0, noticed=1.5) - 1.25) < 1e-6
    # an mtime after the bench noticed, or before it started (a clock step): the bench's own time
    assert bench._landed_or(home, t0, noticed=1.0) == 1.0
    assert bench._landed_or(home, t0 + 2, noticed=1.5) == 1.5
