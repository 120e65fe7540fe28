"""The failure table's rules (the last match near the end wins, the kernel and the GPU before the
log, a missing module names the job's python) and how gflowd's exit decision uses it (pure:
RunObservation in, status out), on the real logs of tests/fixtures/failure_logs/ (SOURCES.md there;
test_failures_real_logs.py checks every one of them)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from controller.decide.exits import attempt_xids, record_exit
from controller.model.failures import FIXES, PATTERNS, classify
from controller.model.gpus import Gpu
from controller.model.plan import RunObservation
from controller.model.reasons import Phase, Reason
from controller.model.records import JobState

FIXTURES = Path(__file__).parent / "fixtures" / "failure_logs"


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


@pytest.mark.parametrize(
    "log, exit_code, sig, reason, cited",
    [
        ("cuda_oom-2.log", 1, None, "CUDAOutOfMemory", "log line 1: torch.OutOfMemoryError: CUDA out of memory"),
        ("cuda_oom-13.log", 1, None, "CUDAOutOfMemory", "log line 5: RuntimeError: CUDA error: CUBLAS_STATUS"),
        ("cuda_oom-10.log", 1, None, "CUDAOutOfMemory", "log line 1: jaxlib.xla_extension.XlaRuntimeError"),
        ("nccl_timeout-6.log", 1, None, "NCCLTimeout", "log line 2:   what():"),
        ("nccl_error-2.log", 1, None, "NCCLError", "log line 2: ncclRemoteError"),
        ("missing_module-1.log", 1, None, "MissingModule", "log line 6: ModuleNotFoundError: No module named"),
        ("missing_module-2.log", 1, None, "MissingModule", "log line 6: ImportError: cannot import name"),
        ("segfault-1.log", 139, None, "Segfault", "log line 11: bash: line 1:"),
        ("segfault-1.log", 139, signal.SIGSEGV, "Segfault", "Segmentation fault"),
    ],
)
def test_each_real_failure_log_is_classified_with_its_fix_and_the_line(log, exit_code, sig, reason, cited):
    found = classify(exit_code, sig, 0, (), lines(log))
    assert found.reason == reason, found
    assert found.message.endswith(FIXES[reason]) or FIXES[reason] in found.message
    assert any(e.startswith(cited) or (cited in e and e.startswith("log line")) for e in found.evidence), found.evidence
    assert found.evidence[0].startswith(f"exit code {exit_code}")


def test_a_job_that_exits_0_is_never_classified_whatever_its_log_says():
    for log in sorted(FIXTURES.glob("*.log")):
        assert classify(0, None, 0, (), log.read_text().splitlines()).reason == "", log.name


def test_a_mention_of_out_of_memory_in_a_successful_line_is_not_a_failure():
    assert classify(0, None, None, (), lines("oom_recovered-1.log")).reason == ""


def test_an_early_warning_does_not_name_a_failure_a_later_traceback_explains():
    found = classify(1, None, 0, (), lines("caught_import_error-2.log"))
    assert found.reason == "", found  # the KeyError is the failure: Error stays


def test_the_last_matching_line_near_the_end_wins():
    log = ["ImportError: optional extension not found, using the slow path"] + ["step"] * 50
    log += ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    assert classify(1, None, 0, (), log).reason == "CUDAOutOfMemory"
    far = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"] + ["step"] * 400
    assert classify(1, None, 0, (), far).reason == ""  # history, not the cause


def test_a_plain_failure_stays_unclassified():
    assert classify(1, None, 0, (), ["epoch 3 loss 0.12", "bye"]).reason == ""
    info = "node1:4242:4301 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22."
    assert classify(1, None, 0, (), [info, "bye"]).reason == ""  # NCCL_DEBUG=INFO's settings
    assert classify(1, signal.SIGKILL, 0, (), []).reason == ""  # killed, and not by the OOM killer


def test_the_cgroups_oom_kills_and_the_gpus_xids_come_before_the_log():
    found = classify(137, signal.SIGKILL, 2, (), lines("cuda_oom-2.log"))
    assert found.reason == "OOMKilled" and "2 OOM kills" in " ".join(found.evidence)
    found = classify(1, None, 0, [(1, 13), (1, 79)], lines("cuda_oom-2.log"))
    assert found.reason == "GPUXid"
    assert "GPU 1 reported Xid 79 (GPU has fallen off the bus)" in found.message
    assert "GPU 1: Xid 13 (graphics engine exception" in " ".join(found.evidence)
    own = classify(1, None, 0, [(0, 31)], [])
    assert own.reason == "GPUXid" and "CUDA_LAUNCH_BLOCKING=1" in own.message  # the job's fault, not the GPU's


def test_a_missing_module_names_the_jobs_python():
    found = classify(1, None, 0, (), lines("missing_module-1.log"), python="/usr/bin/python3")
    assert "the job's python is /usr/bin/python3" in found.message


def test_a_long_log_tail_cites_line_numbers_of_the_whole_log():
    found = classify(1, None, 0, (), lines("missing_module-1.log"), first_line=1001)
    assert found.evidence[-1].startswith("log line 1006: ModuleNotFoundError")


def test_every_pattern_names_a_failed_reason_with_a_fix():
    for pattern in PATTERNS:
        assert Phase.Failed in Reason[pattern.cause].phases and pattern.fix


def run(**kw) -> RunObservation:
    base = dict(name="j", attempt=1, pid=10, started_at=100.0, running=False, exit_code=1, finished_at=200.0)
    return RunObservation(**{**base, **kw})


def test_gflowd_fails_the_job_with_the_cause_keeps_the_exit_code_and_retries_as_before():
    state = JobState(name="j", created=0.0)
    record_exit(state, run(log_tail=tuple(lines("cuda_oom-2.log"))), None, 0)
    assert (state.phase, state.reason, state.exit_code) == (Phase.Failed, Reason.CUDAOutOfMemory, 1)
    assert "CUDA out of memory" in state.message and "lower the batch size" in state.message
    retried = JobState(name="j", created=0.0)
    record_exit(retried, run(log_tail=tuple(lines("cuda_oom-2.log"))), None, 2)
    assert (retried.phase, retried.reason) == (Phase.Pending, Reason.BackOff)
    assert "CUDAOutOfMemory" in retried.message
    plain = JobState(name="j", created=0.0)
    record_exit(plain, run(log_tail=("bye",)), None, 0)
    assert (plain.phase, plain.reason) == (Phase.Failed, Reason.Error)


def test_only_xids_on_the_attempts_gpus_while_it_ran_count():
    gpus = [
        Gpu(0, "GPU-0", "H100", 80 << 30, xids=((150.0, 79),)),
        Gpu(1, "GPU-1", "H100", 80 << 30, xids=((50.0, 48), (150.0, 31), (170.0, 43))),
    ]
    assert attempt_xids(gpus, run(devices=(1,))) == ((1, 31), (1, 43))  # not before it started, not GPU 0's
    assert attempt_xids(gpus, run(devices=())) == ()
    state = JobState(name="j", created=0.0)
    record_exit(state, run(devices=(0,)), None, 0, attempt_xids(gpus, run(devices=(0,))))
    assert state.reason == Reason.GPUXid and "Xid 79 (GPU has fallen off the bus)" in state.message


def test_gflowd_reads_a_log_tail_only_from_the_jobs_own_regular_file(tmp_path):
    """gflowd is root and the job's user owns its log: a link, a fifo, a hard link or a file of
    someone else's put in its place is not read (its lines would reach the status)."""
    import os

    from controller.act.runtime.backends.local.attempt import read_log_tail

    secret = tmp_path / "secret"
    secret.write_text("ModuleNotFoundError: No module named 'TOKEN'\n")
    log = tmp_path / "job.log"
    log.write_text("a\nb\nImportError: x\n")
    mine = os.stat(log).st_uid
    assert read_log_tail(str(log), owner=mine) == (["a", "b", "ImportError: x"], 1)
    assert read_log_tail(str(log), owner=mine + 1) == ([], 1)  # not the job's user's file
    link = tmp_path / "link.log"
    link.symlink_to(secret)
    assert read_log_tail(str(link)) == ([], 1)
    hard = tmp_path / "hard.log"
    os.link(secret, hard)
    assert read_log_tail(str(hard)) == ([], 1)
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    assert read_log_tail(str(fifo)) == ([], 1)  # and it returned: no wait for a writer
    log.write_text("x" * 100 + "\n" + "tail line\n")
    assert read_log_tail(str(log), limit=20) == (["tail line"], 0)  # the cut first line dropped
