"""The trace simulator and ``gflowctl simulate``: figures on hand-checked traces, policy changes
showing in the figures, the committed traces, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cli.main import main
from controller.model.policy import Policy
from controller.sim.simulator import TraceError, named_policy, read_reservations, read_trace, simulate

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "hack" / "traces" / "small.csv"
PHILLY = ROOT / "hack" / "traces" / "philly-shaped.csv"
HEADER = "submit_s,gpus,duration_s,time_limit_s,priority,user\n"


def trace(tmp_path: Path, rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(header + rows)
    return path


def run(path: Path, gpus: int, policy: str) -> dict:
    return simulate(read_trace(path), gpus, named_policy(policy), policy).metrics


# A 2-GPU job runs 0..100 on both GPUs; a 2-GPU job (high priority) arrives at 10 and must wait
# for it; a 1-GPU job of 50 s arrives at 20 with a timeLimit of 60 s. The big job's reservation is
# at 100: the small one may backfill only if it ends by then (20 + 60 = 80 <= 100: yes).
HAND = "0,2,100,100,0,a\n10,2,100,100,5,b\n20,1,50,60,0,c\n"


@pytest.mark.parametrize(
    ("policy", "starts"),
    [
        ("priority", {0: 0.0, 1: 100.0, 2: 200.0}),  # strict: c waits behind b
        ("fifo", {0: 0.0, 1: 100.0, 2: 200.0}),
        ("backfill", {0: 0.0, 1: 100.0, 2: 200.0}),  # no GPU is free at 20: nothing to backfill
        ("firstfit", {0: 0.0, 1: 100.0, 2: 200.0}),
    ],
)
def test_hand_checked_trace_on_two_gpus(tmp_path, policy, starts):
    jobs = read_trace(trace(tmp_path, HAND))
    result = simulate(jobs, 2, named_policy(policy), policy)
    assert {j.index: j.start for j in jobs} == starts
    m = result.metrics
    assert (m["jobs"], m["makespan_s"], m["lower_bound_s"]) == (3, 250.0, 225.0)
    assert m["utilization"] == pytest.approx(450 / (2 * 250))
    assert m["mean_wait_s"] == pytest.approx((0 + 90 + 180) / 3, abs=0.1)
    assert m["max_wait_s"] == 180.0


@pytest.mark.parametrize(
    ("policy", "small_start"),
    [("priority", 200.0), ("backfill", 20.0), ("firstfit", 20.0)],
)
def test_backfill_starts_a_short_job_in_the_gap_strict_priority_does_not(tmp_path, policy, small_start):
    # 3 GPUs: a 2-GPU job holds GPUs 0..100; a 3-GPU job waits for it; a 1-GPU 50 s job with a
    # 60 s limit fits on the free GPU before the reservation at 100.
    rows = "0,2,100,100,0,a\n10,3,100,100,5,b\n20,1,50,60,0,c\n"
    jobs = read_trace(trace(tmp_path, rows))
    simulate(jobs, 3, named_policy(policy), policy)
    assert jobs[2].start == small_start
    assert jobs[1].start == 100.0  # in every policy the big job starts when the GPUs free up


def test_firstfit_starves_the_big_job_that_backfill_protects(tmp_path):
    # A stream of 1-GPU jobs without time limits keeps one GPU busy at all times; the 2-GPU job
    # arrives at 5. firstfit lets each new small job take the GPU that frees up; backfill holds it.
    rows = "0,1,100,,0,a\n5,2,10,10,0,big\n" + "".join(f"{10 + 50 * i},1,100,,0,a\n" for i in range(10))
    path = trace(tmp_path, rows)
    ff = read_trace(path)
    simulate(ff, 2, named_policy("firstfit"))
    bf = read_trace(path)
    simulate(bf, 2, named_policy("backfill"))
    big_ff = next(j for j in ff if j.gpus == 2)
    big_bf = next(j for j in bf if j.gpus == 2)
    assert big_bf.start == 100.0
    assert big_ff.start > 400.0


def test_a_policy_change_shows_in_the_figures_of_the_small_trace():
    figures = {p: run(SMALL, 8, p) for p in ("priority", "firstfit", "backfill")}
    assert figures["backfill"]["mean_wait_s"] < figures["priority"]["mean_wait_s"]
    assert figures["backfill"]["utilization"] > figures["priority"]["utilization"]
    assert figures["firstfit"]["mean_wait_s"] < figures["priority"]["mean_wait_s"]
    largest = {p: f["by_gpus"]["8"]["max_wait_s"] for p, f in figures.items()}
    assert largest["backfill"] < largest["firstfit"]


def test_every_job_runs_exactly_once_and_gpus_are_never_oversubscribed():
    jobs = read_trace(SMALL)
    simulate(jobs, 8, named_policy("default"))
    events = []
    for j in jobs:
        assert j.start is not None and j.start >= j.submit and len(j.devices) == j.gpus
        events += [(j.start, 1, j), (j.end, 0, j)]
    busy: dict[int, str] = {}
    for _, starting, j in sorted(events, key=lambda e: (e[0], e[1])):
        for d in j.devices:
            if starting:
                assert d not in busy, f"GPU {d} given to {j.index} while {busy[d]} holds it"
                busy[d] = j.index
            else:
                del busy[d]


def test_user_quota_in_the_simulator(tmp_path):
    rows = "0,2,100,,0,alice\n0,2,100,,0,alice\n0,2,100,,0,bob\n"
    jobs = read_trace(trace(tmp_path, rows))
    simulate(jobs, 8, Policy(mode="backfill", user_quotas={"alice": 2}))
    assert [j.start for j in jobs] == [0.0, 100.0, 0.0]


@pytest.mark.e2e
def test_committed_philly_shaped_trace_meets_the_targets_for_the_default():
    figures = {p: run(PHILLY, 64, p) for p in ("priority", "firstfit", "default")}
    default = figures["default"]
    assert default["makespan_s"] <= 1.10 * default["lower_bound_s"]
    assert default["utilization"] > figures["priority"]["utilization"]
    assert default["mean_wait_s"] < figures["priority"]["mean_wait_s"]
    assert default["by_gpus"]["8"]["max_wait_s"] < 0.5 * figures["firstfit"]["by_gpus"]["8"]["max_wait_s"]


# --- the CLI ---------------------------------------------------------------------------------------------


def test_cli_json_has_the_documented_keys(capsys):
    assert main(["simulate", "--trace", str(SMALL), "--gpus", "8", "--policy", "backfill", "-o", "json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    for key in (
        "jobs",
        "makespan_s",
        "lower_bound_s",
        "utilization",
        "mean_wait_s",
        "p95_wait_s",
        "max_wait_s",
        "mean_slowdown",
    ):
        assert key in figures
    assert figures["jobs"] == 200 and figures["makespan_s"] >= figures["lower_bound_s"]


def test_cli_table_compares_policies(capsys):
    assert main(["simulate", "--trace", str(SMALL), "--gpus", "8", "--policy", "fifo,firstfit"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["POLICY", "JOBS", "UTIL"]
    assert [line.split()[0] for line in lines[1:]] == ["fifo", "firstfit"]


def test_cli_simulates_a_config_file(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("schedulingPolicy: priority\nagingInterval: 0\nfairShareHalfLife: 0\n")
    assert main(["simulate", "--trace", str(SMALL), "--gpus", "8", "--config", str(config), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == run(SMALL, 8, "priority")


@pytest.mark.parametrize(
    ("rows", "args", "message"),
    [
        ("0,2,100,,0,a\n", ["--gpus", "1"], "trace line 2: the job needs 2 GPUs; --gpus is 1"),
        ("0,two,100,,0,a\n", ["--gpus", "4"], "line 2: gpus: expected an integer, got 'two'"),
        ("0,1,-5,,0,a\n", ["--gpus", "4"], "line 2: duration_s: must be >= 0, got -5"),
        ("0,1,5,,0,a\n", ["--gpus", "0"], "--gpus: must be >= 1"),
        ("0,1,5,,0,a\n", ["--gpus", "4", "--policy", "sjf"], "--policy: unknown policy sjf"),
    ],
)
def test_cli_bad_input_gets_one_line(tmp_path, capsys, rows, args, message):
    path = trace(tmp_path, rows)
    assert main(["simulate", "--trace", str(path), *args]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_missing_columns_and_file(tmp_path, capsys):
    path = trace(tmp_path, "0,1\n", header="submit_s,gpus\n")
    assert main(["simulate", "--trace", str(path), "--gpus", "2"]) == 1
    assert "header lacks columns duration_s, time_limit_s, priority, user" in capsys.readouterr().err
    assert main(["simulate", "--trace", str(tmp_path / "nope.csv"), "--gpus", "2"]) == 1
    assert "No such file" in capsys.readouterr().err


def test_a_trace_that_can_never_finish_is_an_error_not_a_hang(tmp_path):
    with pytest.raises(TraceError, match="can never start"):
        simulate(read_trace(trace(tmp_path, "0,2,10,,0,alice\n")), 4, Policy(user_quotas={"alice": 1}))


@pytest.mark.e2e  # matplotlib's first use on a machine builds its font cache by running fc-list
def test_plot_writes_a_gantt_chart_and_a_wait_cdf(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert (
        main(["simulate", "--trace", str(SMALL), "--gpus", "8", "--policy", "backfill", "--plot", str(tmp_path)]) == 0
    )
    for name in ("gantt-backfill.png", "wait-cdf-backfill.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.e2e
def test_trace_generator_is_reproducible_and_readable(tmp_path):
    gen = ROOT / "hack" / "traces" / "gen_trace.py"
    outputs = [
        subprocess.run(
            [sys.executable, str(gen), "--jobs", "50", "--gpus", "8", "--seed", "3"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for _ in range(2)
    ]
    assert outputs[0] == outputs[1]
    path = tmp_path / "gen.csv"
    path.write_text(outputs[0])
    jobs = read_trace(path)
    assert len(jobs) == 50 and {j.gpus for j in jobs} <= {1, 2, 4, 8}


def test_plot_without_matplotlib_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert main(["simulate", "--trace", str(SMALL), "--gpus", "8", "--plot", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == "error: --plot needs matplotlib: pip install 'gflow-controller[plot]' (or pip install matplotlib)\n"
    assert not list(tmp_path.iterdir())


def test_cores_are_booked_when_the_simulated_machine_has_them(tmp_path):
    # 4 GPUs, 4 cores: a (1 GPU, 3 cores) runs 0..100; b (1 GPU, 2 cores) must wait for its cores
    # although GPUs are free; c (1 GPU, 1 core) fits beside a. Without --cpus all three start at 0.
    path = trace(tmp_path, "0,1,100,100,0,u,3\n1,1,10,10,0,u,2\n2,1,10,10,0,u,1\n", HEADER.strip() + ",cpus\n")
    booked = read_trace(path)
    simulate(booked, 4, named_policy("firstfit"), "firstfit", cpus=4)
    assert [j.start for j in booked] == [0.0, 100.0, 2.0]
    free = read_trace(path)
    simulate(free, 4, named_policy("firstfit"), "firstfit")
    assert [j.start for j in free] == [0.0, 1.0, 2.0]


def test_a_job_with_more_cores_than_the_machine_is_a_trace_error(tmp_path):
    path = trace(tmp_path, "0,1,100,100,0,u,8\n", HEADER.strip() + ",cpus\n")
    with pytest.raises(TraceError, match="the job needs 8 CPUs; --cpus is 4"):
        simulate(read_trace(path), 4, named_policy("backfill"), "backfill", cpus=4)


# -- reservations ------------------------------------------------------------------------------------

# 2 GPUs held for alice over [100, 300). bob's job without a timeLimit may not start before the window
# (nothing would end it in time) nor inside it: it starts at 300. bob's short job with a timeLimit
# that ends by 100 backfills at 0; alice's job arriving at 150 runs at once, inside her window.
RESERVED = "0,1,200,,0,bob\n0,1,50,100,0,bob\n150,2,60,,0,alice\n"
WINDOW = "start_s,duration_s,devices,users\n100,200,0 1,alice\n"


def test_the_simulator_honours_a_reservation(tmp_path):
    window = tmp_path / "reservations.csv"
    window.write_text(WINDOW)
    jobs = read_trace(trace(tmp_path, RESERVED))
    simulate(jobs, 2, named_policy("backfill"), "backfill", reservations=read_reservations(window))
    assert {j.index: j.start for j in jobs} == {0: 300.0, 1: 0.0, 2: 150.0}
    free = read_trace(trace(tmp_path, RESERVED))
    simulate(free, 2, named_policy("backfill"), "backfill")
    assert {j.index: j.start for j in free} == {0: 0.0, 1: 0.0, 2: 200.0}  # without it: bob first


def test_simulate_cli_takes_reservations_and_refuses_a_gpu_it_lacks(tmp_path, capsys):
    window = tmp_path / "reservations.csv"
    window.write_text(WINDOW)
    path = trace(tmp_path, RESERVED)
    assert (
        main(
            [
                "simulate",
                "--trace",
                str(path),
                "--gpus",
                "2",
                "--policy",
                "backfill",
                "-o",
                "json",
                "--reservations",
                str(window),
            ]
        )
        == 0
    )
    figures = json.loads(capsys.readouterr().out)
    assert figures["max_wait_s"] == 300.0
    window.write_text("start_s,duration_s,devices,users\n100,200,0 3,alice\n")
    assert main(["simulate", "--trace", str(path), "--gpus", "2", "--reservations", str(window)]) == 1
    assert "reservation line 2: GPU 3 does not exist; --gpus is 2" in capsys.readouterr().err


MIG_MACHINE = (
    "gpus:\n"
    "  - {name: NVIDIA A100-SXM4-80GB, memory: 80Gi, mig: [{profile: 3g.40gb}, {profile: 1g.10gb}, {profile: 1g.10gb}]}\n"
    "  - {name: NVIDIA A100-SXM4-80GB, memory: 80Gi}\n"
)


def test_cli_simulates_the_machine_of_a_fake_gpu_file_mig_instances_as_units(tmp_path, capsys):
    machine = tmp_path / "gpus.yaml"
    machine.write_text(MIG_MACHINE)
    rows = "0,1,100,,0,a,1g.10gb\n0,1,100,,0,b,1g.10gb\n0,1,100,,0,c,1g.10gb\n0,1,100,,0,d,\n0,1,100,,0,e,3g.40gb\n"
    path = trace(tmp_path, rows, header="submit_s,gpus,duration_s,time_limit_s,priority,user,gpu_type\n")
    args = ["simulate", "--trace", str(path), "--fake-gpus", str(machine), "--policy", "fifo", "-o", "json"]
    assert main(args) == 0
    figures = json.loads(capsys.readouterr().out)
    # two 1g.10gb instances for three 1g jobs: the third waits 100 s; d takes the whole GPU, e the 3g slice
    assert figures["jobs"] == 5 and figures["makespan_s"] == 200.0 and figures["max_wait_s"] == 100.0, figures
    assert main(["simulate", "--trace", str(path), "--gpus", "4"]) == 1  # typed jobs need a machine of typed GPUs
    assert "gpu_type needs a machine of typed GPUs" in capsys.readouterr().err


def test_cli_fake_gpus_bad_file_and_too_big_a_job_get_one_line(tmp_path, capsys):
    path = trace(tmp_path, "0,4,100,,0,a\n")
    machine = tmp_path / "gpus.yaml"
    machine.write_text(MIG_MACHINE)
    assert main(["simulate", "--trace", str(path), "--fake-gpus", str(machine)]) == 1
    err = capsys.readouterr().err
    # 4 units (3 instances and a whole GPU), but a job with no gpu_type takes whole GPUs only
    assert (
        "trace line 2: the job needs 4 whole GPUs (a MIG instance takes its profile's jobs only); the machine has 1"
        in err
    )
    machine.write_text(MIG_MACHINE.replace("3g.40gb", "9z.bad"))
    assert main(["simulate", "--trace", str(path), "--fake-gpus", str(machine)]) == 1
    err = capsys.readouterr().err
    assert "--fake-gpus: " in err and "gpus[0].mig[0]: needs a profile like 1g.10gb" in err and err.count("\n") == 1
    assert main(["simulate", "--trace", str(path), "--fake-gpus", str(tmp_path / "nope.yaml")]) == 1
    err = capsys.readouterr().err
    assert "--fake-gpus: " in err and "No such file" in err and err.count("\n") == 1
