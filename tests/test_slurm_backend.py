"""The Slurm backend's pure parts: Slurm's words -> our observations, the reconcile hooks a
cluster backend uses (no binding, queued runs Pending with the cluster's reason, the cluster's
id/node/devices in the status), and the config and flags that select it. No Slurm needed; the
real cluster is ``test_slurm_e2e.py``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from controller.act.runtime.backends.slurm.words import (
    SlurmJob,
    gres_devices,
    observation,
    parse_squeue,
)
from controller.act.runtime.backends.slurm.words import (
    SlurmRecord as _Record,
)
from controller.api.config import ConfigError, load_config
from controller.model.plan import RunObservation

sys.path.insert(0, str(Path(__file__).parent))
from builders import T0, World, job


def record(**kw) -> _Record:
    base = dict(
        name="a",
        attempt=2,
        generation=1,
        comment="gflow:x:a:g1:a2",
        options=[],
        script="",
        job_id="41",
        submitted_at=T0,
    )
    base.update(kw)
    return _Record(**base)


def sjob(state: str, **kw) -> SlurmJob:
    return SlurmJob(job_id="41", state=state, **kw)


# -- squeue --json ----------------------------------------------------------------------------------


def test_parse_squeue_22_05_shape():
    text = json.dumps(
        {
            "jobs": [
                {
                    "job_id": 41,
                    "job_state": "FAILED",
                    "state_reason": "NonZeroExitCode",
                    "comment": "gflow:x:a:g1:a2",
                    "exit_code": 768,
                    "nodes": "vm",
                    "gres_detail": [],
                    "submit_time": 10,
                    "start_time": 11,
                    "end_time": 14,
                }
            ]
        }
    )
    [parsed] = parse_squeue(text)
    assert parsed == SlurmJob("41", "FAILED", "NonZeroExitCode", "gflow:x:a:g1:a2", 768, "vm", (), 10.0, 11.0, 14.0)


def test_parse_squeue_newer_shape_with_lists_and_numbers():
    text = json.dumps(
        {
            "jobs": [
                {
                    "job_id": 7,
                    "job_state": ["TIMEOUT"],
                    "exit_code": {
                        "status": ["SIGNALED"],
                        "return_code": {"set": True, "number": 0},
                        "signal": {"id": {"set": True, "number": 15}},
                    },
                    "start_time": {"set": True, "number": 5},
                    "end_time": {"set": True, "number": 9},
                }
            ]
        }
    )
    [parsed] = parse_squeue(text)
    assert (parsed.state, parsed.exit_status, parsed.start_time, parsed.end_time) == ("TIMEOUT", 15, 5.0, 9.0)


def test_parse_squeue_refuses_what_is_not_json():
    with pytest.raises(ValueError):
        parse_squeue("JOBID PARTITION NAME\n")


def test_parse_sacct_allocation_lines():
    from datetime import datetime

    from controller.act.runtime.backends.slurm.words import parse_sacct

    text = (
        "41|CANCELLED by 0|0:15|vm|2026-11-22T20:04:44|2026-11-22T20:04:45|2026-11-22T20:05:00\n"
        "42|COMPLETED|0:0|n1|2026-11-22T20:04:44|2026-11-22T20:04:45|2026-11-22T20:04:48\n"
        "43|FAILED|3:0|n2|2026-11-22T20:04:44|Unknown|Unknown\n"
        "44|PENDING|0:0|None assigned|2026-11-22T20:04:44|Unknown|Unknown\n"
    )
    jobs = {j.job_id: j for j in parse_sacct(text)}
    assert (jobs["41"].state, jobs["41"].exit_status, jobs["41"].nodes) == ("CANCELLED", 15, "vm")
    assert jobs["42"].end_time == datetime.fromisoformat("2026-11-22T20:04:48").timestamp()
    assert (jobs["43"].state, jobs["43"].exit_status >> 8, jobs["43"].start_time) == ("FAILED", 3, 0.0)
    assert jobs["44"].nodes == ""
    assert observation(record(), jobs["43"], T0).exit_code == 3


@pytest.mark.parametrize(
    "detail, devices",
    [
        (("gpu:1(IDX:0)",), [0]),
        (("gpu:2(IDX:0-1)",), [0, 1]),
        (("gpu:a100:3(IDX:0,2-3)",), [0, 2, 3]),
        (("gpu:1(IDX:2)", "nic:1(IDX:0)"), [2]),
        ((), []),
        (("gpu:1",), []),
        # recorded from Slurm 22.05 (hack/slurm-dev.sh: h100 = IDX 0-1, a100 = IDX 2-3), squeue
        # --json's gres_detail and scontrol show job -d's GRES= alike: one string names every type
        (("gpu:h100:1(IDX:1),gpu:a100:1(IDX:2)",), [1, 2]),  # --gres=gpu:2 with GPU 0 taken
        (("gpu:h100:2(IDX:0-1),gpu:a100:2(IDX:2-3)",), [0, 1, 2, 3]),  # --gres=gpu:4
        (("gpu:h100:2(IDX:0-1),gpu:a100:1(IDX:3)",), [0, 1, 3]),  # --gres=gpu:3 with GPU 2 taken
        (("gpu:a100:2(IDX:2-3)",), [2, 3]),
        (("(null)",), []),  # scontrol's GRES= of a job without GPUs
        # the forms other versions and sites print
        (("gpu:a100:4(IDX:0-2,5)",), [0, 1, 2, 5]),
        (("gres:gpu:h100:1(IDX:1),gres:gpu:a100:1(IDX:2)",), [1, 2]),
        (("gres/gpu:2(IDX:4-5)",), [4, 5]),
        (("gpu:1(IDX:N/A)", "shard:gpu:2(IDX:3)", "gpumem:1(IDX:3)"), []),
        (("nic:1(IDX:0),gpu:h100:1(IDX:1)", "gpu:1(IDX:3)"), [1, 3]),  # two nodes' details
    ],
)
def test_gres_devices(detail, devices):
    assert gres_devices(detail) == devices


# -- Slurm states -> observations --------------------------------------------------------------------


@pytest.mark.parametrize(
    "job, expect",
    [
        (sjob("PENDING", reason="Resources"), dict(running=True, queued="Resources")),
        (sjob("PENDING", reason="Priority"), dict(running=True, queued="Priority")),
        (sjob("PENDING", reason="Dependency"), dict(running=True, queued="Dependency")),
        (sjob("PENDING", reason="BeginTime"), dict(running=True, queued="StartAfter")),
        (sjob("PENDING", reason="JobHeldUser"), dict(running=True, queued="Held")),
        (sjob("PENDING", reason="None"), dict(running=True, queued="Queued")),
        (sjob("PENDING", reason="ReqNodeNotAvail, UnavailableNodes:vm"), dict(running=True, queued="ReqNodeNotAvail")),
        (sjob("REQUEUED"), dict(running=True, queued="Queued")),
        (sjob("RUNNING", nodes="vm", start_time=T0 + 5), dict(running=True, queued="", node="", started_at=T0 + 5)),
        (sjob("COMPLETING"), dict(running=True, queued="")),
        (
            sjob("COMPLETED", exit_status=0, end_time=T0 + 9),
            dict(running=False, exit_code=0, error="", finished_at=T0 + 9),
        ),
        (sjob("FAILED", exit_status=3 << 8), dict(running=False, exit_code=3, error="", reason="")),
        (sjob("FAILED", exit_status=9), dict(running=False, exit_code=137, signal=9)),
        (sjob("TIMEOUT", exit_status=15), dict(running=False, reason="DeadlineExceeded", exit_code=143)),
        (sjob("OUT_OF_MEMORY", exit_status=0), dict(running=False, reason="OOMKilled", exit_code=137)),
        (
            sjob("CANCELLED", exit_status=15),
            dict(running=False, exit_code=143, error="Slurm job 41 was cancelled in Slurm"),
        ),
        (
            sjob("NODE_FAIL", nodes="n3"),
            dict(running=False, lost=True, error="Slurm job 41: node n3 failed (Slurm NODE_FAIL)"),
        ),
        (sjob("PREEMPTED"), dict(running=False, error="Slurm job 41 ended PREEMPTED in Slurm")),
        (None, dict(running=False, lost=True)),
    ],
)
def test_observation_of_each_slurm_state(job, expect):
    obs = observation(record(), job, T0 + 100)
    assert obs.external_id == "41" and obs.attempt == 2
    for key, value in expect.items():
        assert getattr(obs, key) == value, (key, obs)


def test_a_failure_slurmstepd_reported_as_over_memory_is_oomkilled():
    # no cgroups: Slurm kills over --mem by polling and calls it FAILED; its message says why
    assert observation(record(), sjob("FAILED", exit_status=9), T0, memory_exceeded=True).reason == "OOMKilled"
    assert observation(record(), sjob("FAILED", exit_status=9), T0).reason == ""


def test_observation_of_a_refused_submission_is_an_ended_attempt_with_sbatchs_words():
    obs = observation(record(job_id=None, error="sbatch refused the job: Invalid generic resource"), None, T0)
    # it never ran: no exit code to show (get jobs -o wide's EXIT said 127, a shell's "not found")
    assert (obs.running, obs.exit_code, obs.error) == (False, None, "sbatch refused the job: Invalid generic resource")


def test_observation_carries_the_devices_and_node_seen_while_running():
    obs = observation(record(devices=[2], node="vm"), sjob("COMPLETED"), T0)
    assert (obs.devices, obs.node) == ((2,), "vm")


# -- reconcile with a backend that allocates ---------------------------------------------------------


def ClusterWorld(*docs, **fields) -> World:
    """gflowd with a cluster backend: nothing is bound, runs come back from the cluster, and
    gflowd's own machine may have no GPU at all."""
    return World(*docs, n_gpus=0, bind_gpus=False, **fields)


def test_a_gpu_job_is_handed_over_unbound_when_the_backend_allocates():
    world = ClusterWorld(job("a", resources={"gpus": 8}))
    plan = world.tick(T0)
    (launch,) = plan.starts
    assert launch.devices == []
    st = world.state()
    assert (st.phase, st.reason, st.message) == ("Running", "Started", "submitted to the cluster")


def test_a_job_queued_in_the_cluster_is_pending_with_its_reason_then_runs():
    world = ClusterWorld(job("a", resources={"gpus": 1}, timeLimit="10s"))
    world.tick(T0)
    world.runs["a"] = RunObservation(
        "a",
        1,
        None,
        T0,
        True,
        queued="Resources",
        message="Slurm job 7 is pending in Slurm (Resources)",
        external_id="7",
    )
    plan = world.tick(T0 + 60)  # far past the time limit: it does not count while queued
    st = world.state()
    assert (st.phase, st.reason, st.message) == ("Pending", "Resources", "Slurm job 7 is pending in Slurm (Resources)")
    assert (st.backend_id, st.start_time, plan.stops) == ("7", None, ())
    world.runs["a"] = RunObservation(
        "a",
        1,
        None,
        T0 + 61,
        True,
        message="Slurm job 7 running on vm, GPUs 3",
        node="vm",
        external_id="7",
        devices=(3,),
    )
    world.tick(T0 + 62)
    st = world.state()
    assert (st.phase, st.reason, st.message) == ("Running", "Started", "Slurm job 7 running on vm, GPUs 3")
    assert (st.start_time, st.node, st.devices) == (T0 + 61, "vm", [3])
    plan = world.tick(T0 + 72)  # its own start + 10 s: now the limit applies
    assert [s.reason for s in plan.stops] == ["DeadlineExceeded"]


def test_a_cancelled_queued_job_is_stopped():
    world = ClusterWorld(job("a"))
    world.tick(T0)
    world.runs["a"] = RunObservation("a", 1, None, T0, True, queued="Priority", external_id="7")
    world.tick(T0 + 1)
    world.put(job("a", cancelled=True))
    plan = world.tick(T0 + 2)
    assert [s.reason for s in plan.stops] == ["UserCancelled"]
    world.runs["a"] = replace(
        world.runs["a"],
        running=False,
        queued="",
        exit_code=143,
        signal=15,
        finished_at=T0 + 3,
        error="Slurm job 7 was cancelled in Slurm",
    )
    world.tick(T0 + 3)
    assert world.phase() == ("Cancelled", "UserCancelled")


def test_an_attempt_that_ended_unseen_still_records_where_it_ran():
    world = ClusterWorld(job("a"))
    world.tick(T0)
    world.runs["a"] = RunObservation("a", 1, None, T0, False, 0, None, T0 + 1, node="vm", external_id="9", devices=(1,))
    world.tick(T0 + 2)
    st = world.state()
    assert (st.phase, st.backend_id, st.node, st.devices) == ("Succeeded", "9", "vm", [1])
    assert st.to_status()["status"]["backendJobId"] == "9"


def test_an_attempt_that_ran_between_two_passes_while_queued_keeps_its_start_time():
    """Slurm started and finished it between two looks: last seen Pending (no startTime), next
    seen ended. Its start is Slurm's, as for one seen running."""
    world = ClusterWorld(job("a"))
    world.tick(T0)
    world.runs["a"] = RunObservation("a", 1, None, T0, True, queued="Resources", external_id="9")
    world.tick(T0 + 1)
    assert world.state().start_time is None
    world.runs["a"] = RunObservation("a", 1, None, T0 + 2, False, 0, None, T0 + 3, node="vm", external_id="9")
    world.tick(T0 + 4)
    st = world.state()
    assert (st.phase, st.start_time, st.completion_time) == ("Succeeded", T0 + 2, T0 + 3)


def test_sweep_parallelism_counts_children_queued_in_the_cluster():
    from controller.api.sweep import Sweep
    from controller.api.sweep_children import expand

    sweep = Sweep.model_validate(
        {
            "kind": "Sweep",
            "metadata": {"name": "s"},
            "spec": {"indices": "0-3", "parallelism": 2, "template": {"command": ["true"]}},
        }
    )
    record_, children = expand(sweep, "s", source="s.yaml", path="/s.yaml", doc_index=0, owner_uid=-1, mtime_ns=0)
    world = ClusterWorld(record_, *children)
    assert len(world.tick(T0).starts) == 2
    for name in list(world.runs):  # both handed over, both waiting in the cluster's queue
        world.runs[name] = replace(world.runs[name], queued="Resources", external_id=name)
    plan = world.tick(T0 + 1)
    assert plan.starts == ()  # Pending in Slurm, yet handed over: the cap of 2 holds
    assert sorted(n for n, st in world.states.items() if st.reason == "Resources") == ["s-0", "s-1"]


# -- configuration -----------------------------------------------------------------------------------


def test_config_selects_the_slurm_backend_and_flags_override_keys(tmp_path: Path):
    from controller.api.config import flag_overrides

    path = tmp_path / "config.yaml"
    path.write_text("backend: slurm\nslurm: {partition: gpu, extraArgs: [--qos=high]}\n")
    config = load_config(path, flag_overrides({("slurm", "account"): "lab", ("slurm", "partition"): "a100"}))
    assert (config.backend, config.slurm.partition, config.slurm.account, config.slurm.extra_args) == (
        "slurm",
        "a100",
        "lab",
        ["--qos=high"],
    )
    assert load_config(tmp_path / "none.yaml", {}).backend == "local"


def test_a_flag_overrides_the_same_key_spelt_camelcase_in_config_yaml(tmp_path: Path):
    from controller.api.config import flag_overrides

    path = tmp_path / "config.yaml"
    path.write_text("metricsPort: 5\nslurm: {extraArgs: [--qos=low], gpuTypes: {H100: h100}}\n")
    config = load_config(path, flag_overrides({("metrics_port",): 7, ("slurm", "extra_args"): ["--qos=high"]}))
    assert (config.metrics_port, config.slurm.extra_args, config.slurm.gpu_types) == (
        7,
        ["--qos=high"],
        {"H100": "h100"},
    )


def test_gpu_types_from_config_yaml_or_the_flag(tmp_path: Path):
    from controller.api.config import flag_overrides
    from controller.daemon.main import build_parser

    path = tmp_path / "config.yaml"
    path.write_text("slurm: {gpuTypes: {H100: h100, A100: a100}}\n")
    assert load_config(path, {}).slurm.gpu_types == {"H100": "h100", "A100": "a100"}
    args = build_parser().parse_args(["--slurm-gpu-types", "H100=nvidia_h100, L4=l4"])
    config = load_config(
        tmp_path / "none.yaml", flag_overrides({("slurm", "gpu_types"): getattr(args, "slurm.gpu_types")})
    )
    assert config.slurm.gpu_types == {"H100": "nvidia_h100", "L4": "l4"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("backend: k8s\n", "backend"),
        ("slurm: {partitio: gpu}\n", "config.yaml: slurm.partitio: Extra inputs are not permitted"),
        ("slurm: {extraArgs: --qos}\n", "slurm.extraArgs"),
        ("slurm: {gpuTypes: {H100: 'h100:2'}}\n", "slurm.gpuTypes: H100: 'h100:2' is not a GRES type"),
        ("slurm: {gpuTypes: H100}\n", "slurm.gpuTypes: expected GPUTYPE=GRESTYPE"),
        ("k8s: {image: ''}\n", "k8s.image"),
    ],
)
def test_bad_slurm_config_is_one_line_naming_the_key(tmp_path: Path, text, message):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path, {})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_gflowd_flags_are_generated_for_the_slurm_section():
    from controller.daemon.main import build_parser

    args = build_parser().parse_args(
        ["--backend", "slurm", "--slurm-partition", "gpu", "--slurm-extra-args=--qos=a,--exclusive"]
    )
    assert (args.backend, getattr(args, "slurm.partition"), getattr(args, "slurm.extra_args")) == (
        "slurm",
        "gpu",
        ["--qos=a", "--exclusive"],
    )


@pytest.mark.e2e
def test_gflowd_with_the_slurm_backend_and_no_slurm_exits_with_one_line(tmp_path: Path):
    import os
    import subprocess

    env = {**os.environ, "PATH": "/nonexistent", "GFLOW_HOME": str(tmp_path / "h")}
    result = subprocess.run(
        [sys.executable, "-m", "controller.daemon", "--backend", "slurm"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("gflowd: --backend slurm: squeue not found") and result.stderr.count("\n") == 1


@pytest.mark.e2e
@pytest.mark.parametrize(
    "backend, leftover, message",
    [
        ("slurm", "run/attempts/train.1", "1 job(s) of the local backend are not finished (train)"),
        ("local", "run/slurm/train.json", "1 job(s) of the slurm backend are not finished (train)"),
    ],
)
def test_switching_backend_with_unfinished_jobs_is_refused(tmp_path: Path, backend, leftover, message):
    import os
    import subprocess

    home = tmp_path / "h"
    (home / leftover).parent.mkdir(parents=True)
    (home / leftover).write_text("{}")
    result = subprocess.run(
        [sys.executable, "-m", "controller.daemon", "--home", str(home), "--backend", backend],
        env={**os.environ, "PATH": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert (
        result.stderr
        == f"gflowd: --backend {backend}: {message}; run with --backend {'local' if backend == 'slurm' else 'slurm'} until they are\n"
    )
