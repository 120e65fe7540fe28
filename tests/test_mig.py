"""MIG pieces that are pure: the fake-GPU file's ``mig:`` list, profile matching and the
Unschedulable words, the request flags and directives, the env and the exports."""

from __future__ import annotations

import pytest
from test_export import job, validate

from controller.api.jobenv import cuda_devices
from controller.api.submit import SubmitError, _sbatch_options, gpus_option, parse_gres
from controller.decide.placement.gpu_text import never_fits_text
from controller.decide.placement.gpus import matches
from controller.export import k8s, slurm
from controller.model.mig import mig_profile_of
from controller.model.scheduling import GpuSlot
from controller.observe.gpus.inventory import parse_fake_gpus
from controller.sim.simulator import TraceError, named_policy, read_trace, simulate

FILE = """\
gpus:
  - {name: NVIDIA A100-SXM4-80GB, memory: 80Gi, mig: [{profile: 3g.40gb}, {profile: 3g.40gb}]}
  - {name: NVIDIA A100-SXM4-80GB, memory: 80Gi, mig: [{profile: 1g.10gb, memory: 9728Mi}]}
  - {name: NVIDIA A100-SXM4-80GB, memory: 80Gi}
"""


def test_instances_get_ids_after_the_physical_gpus_in_nvml_order():
    gpus = parse_fake_gpus(FILE)
    assert [(g.index, g.parent, g.profile, g.local_index) for g in gpus] == [
        (2, None, "", None),
        (3, 0, "3g.40gb", 0),
        (4, 0, "3g.40gb", 1),
        (5, 1, "1g.10gb", 0),
    ]
    assert gpus[1].memory_total == 40 << 30 and gpus[3].memory_total == 9728 << 20
    assert gpus[3].display_name == "MIG 1g.10gb (GPU 1)" and gpus[3].device_minor == 1
    assert gpus[1].uuid.startswith("MIG-")


@pytest.mark.parametrize(
    "text, error",
    [
        ("gpus:\n  - {mig: [{profile: big}]}\n", "gpus[0].mig[0]: needs a profile like 1g.10gb"),
        ("gpus:\n  - {mig: {profile: 1g.10gb}}\n", "gpus[0].mig: expected a list"),
        ("gpus:\n  - {mig: [{profile: 1g.10gb, color: red}]}\n", "gpus[0].mig[0]: unknown field color"),
    ],
)
def test_a_bad_mig_list_says_what_to_fix(text, error):
    with pytest.raises(ValueError, match=error.replace("[", r"\[").replace("]", r"\]")):
        parse_fake_gpus(text)


def request(gpu_type, gpus=1):
    from controller.model.scheduling import Request

    return Request(name="j", gpus=gpus, gpu_type=gpu_type)


def test_a_profile_picks_its_instances_and_a_whole_gpu_request_never_an_instance():
    slots = [GpuSlot(g, "Free") for g in parse_fake_gpus(FILE)]
    picked = lambda t: [s.index for s in slots if matches(s, request(t))]
    assert picked("3G.40GB") == [3, 4] and picked("1g.10gb") == [5]
    assert picked(None) == [2] and picked("A100") == [2]
    text = never_fits_text(request("2g.20gb"), slots, [])
    assert text == "needs 1 GPU of type 2g.20gb: no MIG 2g.20gb instance: GPU 0 has 3g.40gb x2; GPU 1 has 1g.10gb x1"
    text = never_fits_text(request(None, 2), slots, [slots[0]])
    assert "this machine has 1 whole" in text and "GPU 0 has 3g.40gb x2" in text


def test_mig_profile_from_nvml_names():
    assert mig_profile_of("NVIDIA A100-SXM4-40GB MIG 1g.5gb") == "1g.5gb"
    assert mig_profile_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me") == "1g.10gb+me"
    assert mig_profile_of("NVIDIA A100-SXM4-40GB") == ""


def test_gpus_flags_and_directives_name_a_profile():
    assert gpus_option("1g.10gb") == {"gpus": "1", "gpu_type": "1g.10gb"}
    assert gpus_option("2:1g.10gb") == gpus_option("1g.10gb:2") == {"gpus": "2", "gpu_type": "1g.10gb"}
    assert gpus_option("a100:2") == {"gpus": "2", "gpu_type": "a100"} and gpus_option("3") == {"gpus": "3"}
    assert parse_gres("gpu:1g.10gb:1") == parse_gres("gpu:1g.10gb") == {"gpus": "1", "gpu_type": "1g.10gb"}
    with pytest.raises(SubmitError):
        parse_gres("gpu:a100")
    warnings: list[str] = []
    for directive in ("--gres=gpu:1g.10gb:1", "--gres=gpu:1g.10gb", "--gpus=1g.10gb"):
        assert _sbatch_options([directive], "x line 2: ", warnings) == {"gpus": "1", "gpu_type": "1g.10gb"}
    assert warnings == []


def test_cuda_devices_names_mig_instances_by_uuid():
    assert cuda_devices([3], ["MIG-aaaa"]) == "MIG-aaaa"
    assert cuda_devices([0, 1], ["GPU-a", "GPU-b"]) == "0,1"
    assert cuda_devices([0], []) == "0"


def test_exports_ask_the_cluster_for_the_profile():
    spec = job(resources={"gpus": 1, "gpuType": "1g.10gb"})
    assert "--gres=gpu:1g.10gb:1" in slurm.sbatch_options(spec.spec, "t", chdir="/", output="o")
    exported = k8s.export_job(spec, "train", "/lab", image="img:1")
    validate(exported.data)
    limits = exported.data["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-1g.10gb": "1"}
    assert not any("gpuType" in note for note in exported.notes)


def test_simulate_places_trace_jobs_on_mig_instances(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "submit_s,gpus,duration_s,time_limit_s,priority,user,gpu_type\n"
        "0,1,100,,0,a,1g.10gb\n0,1,100,,0,b,1g.10gb\n0,1,100,,0,c,1g.10gb\n0,1,50,,0,d,\n"
    )
    machine = tmp_path / "gpus.yaml"
    machine.write_text(
        "gpus:\n  - {name: NVIDIA A100-SXM4-80GB, memory: 80Gi, mig: [{profile: 1g.10gb}, {profile: 1g.10gb}]}\n"
        "  - {name: NVIDIA A100-SXM4-80GB, memory: 80Gi}\n"
    )
    jobs = simulate(read_trace(trace), 0, named_policy("fifo"), inventory=parse_fake_gpus(machine.read_text())).jobs
    placed = {j.user: (j.start, j.devices) for j in jobs}
    # two instances for three 1g jobs: the third waits; the whole-GPU job takes GPU 1, never an instance
    assert placed == {"a": (0.0, (2,)), "b": (0.0, (3,)), "c": (100.0, (2,)), "d": (0.0, (1,))}
    trace.write_text(trace.read_text() + "0,1,10,,0,e,3g.40gb\n")
    with pytest.raises(TraceError, match=r"trace line 6: the job needs 1 GPUs of type 3g\.40gb; the machine has 0"):
        simulate(read_trace(trace), 0, named_policy("fifo"), inventory=parse_fake_gpus(machine.read_text()))
    with pytest.raises(TraceError, match="trace line 2: gpu_type needs a machine of typed GPUs"):
        simulate(read_trace(trace), 8, named_policy("fifo"))  # --gpus N: all alike
