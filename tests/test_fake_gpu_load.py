"""The demo's fake GPUs carry load: with ``simulateLoad: true`` (manifests/examples/fake-gpus.yaml
has it) a GPU a job holds reports utilization and memory use that move, an idle one 0%, so the
sample Grafana dashboard's GPU panels draw something in the demo. NVML is the hardware edge, so
this is the one place a fake stands in; the gflowd, its jobs and the scrapes are real."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import wait_for, wait_phase, write_manifest
from test_metrics import held_job, metrics_url, scrape, value

EXAMPLE_GPUS = Path(__file__).resolve().parent.parent / "manifests" / "examples" / "fake-gpus.yaml"
GIB = 1 << 30


def test_a_held_gpu_moves_within_its_bounds_and_an_idle_one_stays_at_rest():
    from controller.observe.gpus.inventory import parse_fake_gpus, simulated_load

    gpu = parse_fake_gpus("gpus:\n  - {name: A, memory: 80Gi, memoryUsed: 1Gi}\n")[0]
    idle = simulated_load(gpu, 0, 1000.0)
    assert (idle.utilization, idle.memory_used) == (0, GIB)
    seen = [simulated_load(gpu, 1, float(t)) for t in range(0, 600, 5)]
    assert all(45 <= g.utilization <= 95 for g in seen)
    assert all(GIB + 0.3 * 80 * GIB <= g.memory_used <= GIB + 0.6 * 80 * GIB for g in seen)
    assert max(g.utilization for g in seen) - min(g.utilization for g in seen) >= 30  # it moves, not jitters
    assert simulated_load(gpu, 1, 7.0) == simulated_load(gpu, 1, 7.0)  # a function of the time given


def test_a_simulate_load_that_is_not_a_boolean_is_named_and_the_last_good_gpus_kept(tmp_path):
    from controller.observe.gpus.inventory import FakeInventory

    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n  - {name: A}\n")
    inventory = FakeInventory(fake)
    assert [g.name for g in inventory.read()] == ["A"]
    fake.write_text("simulateLoad: sometimes\ngpus:\n  - {name: B}\n")
    assert [g.name for g in inventory.read()] == ["A"]
    assert inventory.error.endswith("simulateLoad: must be true or false"), inventory.error


def test_without_simulate_load_a_fake_gpu_reports_what_its_file_says(tmp_path):
    from controller.observe.gpus.inventory import FakeInventory

    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n  - {name: A, memory: 16Gi}\n")
    node = tmp_path / "node.yaml"
    node.write_text("gpus:\n  - {index: 0, jobs: [train]}\n")
    [gpu] = FakeInventory(fake, node, clock=lambda: 5.0).read()
    assert (gpu.utilization, gpu.memory_used) == (None, 0)
    fake.write_text("simulateLoad: true\ngpus:\n  - {name: A, memory: 16Gi}\n")
    [gpu] = FakeInventory(fake, node, clock=lambda: 5.0).read()
    assert gpu.utilization >= 45 and gpu.memory_used >= 0.3 * 16 * GIB


@pytest.mark.e2e
def test_the_demo_gpus_show_a_running_jobs_load_in_a_real_scrape(home, gflowd, tmp_path):
    """gflowd on the demo's own fake-GPU file: the GPU the job holds reports utilization and
    memory that change from scrape to scrape; the GPUs nobody holds report 0%."""
    release = tmp_path / "release"
    release.mkdir()
    daemon = gflowd("--fake-gpus", EXAMPLE_GPUS, "--metrics-port", "0")
    url = metrics_url(daemon)
    write_manifest(home / "jobs", "train.yaml", held_job("train", 1, release))
    wait_phase(home, "train", "Running", daemon=daemon)
    held = wait_for(
        lambda: next(
            (
                gpu
                for gpu in "0123"
                if value(scrape(url), "gflow_gpu_allocated_jobs", gpu=gpu) == 1
                and (value(scrape(url), "gflow_gpu_utilization_percent", **labels_of(url, gpu)) or 0) > 0
            ),
            None,
        ),
        message="the job's GPU busy in a scrape",
    )
    labels = labels_of(url, held)

    def reading():
        samples = scrape(url)
        return (
            value(samples, "gflow_gpu_utilization_percent", **labels),
            value(samples, "gflow_gpu_memory_used_bytes", **labels),
        )

    first = reading()
    assert 45 <= first[0] <= 95 and first[1] > 0, first
    wait_for(lambda: reading()[1] != first[1], message="the held GPU's memory use moving")
    samples = scrape(url)
    for idle in set("0123") - {held}:
        assert value(samples, "gflow_gpu_utilization_percent", **labels_of(url, idle)) == 0, idle
        assert value(samples, "gflow_gpu_memory_used_bytes", **labels_of(url, idle)) == 0, idle
    (release / "train").touch()
    wait_phase(home, "train", "Succeeded", daemon=daemon)
    wait_for(
        lambda: value(scrape(url), "gflow_gpu_utilization_percent", **labels) == 0,
        message="the GPU back at rest once the job ended",
    )


def labels_of(url: str, gpu: str) -> dict[str, str]:
    """The (gpu, uuid, name) labels of one GPU's series, as served."""
    for (name, labels), _ in scrape(url).items():
        found = dict(labels)
        if name == "gflow_gpu_memory_total_bytes" and found["gpu"] == gpu:
            return found
    raise AssertionError(f"no GPU {gpu} in the scrape")
