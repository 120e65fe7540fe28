"""The failure table on real log text (tests/fixtures/failure_logs/, each file's source in SOURCES.md
there): logs users pasted into issue threads (PyTorch, NCCL, JAX, CuPy/Chainer, numba, TensorFlow,
the NVIDIA driver) and logs produced here by running the failure (a segfault, a missing module, a
host OOM kill in a memory cgroup, a caught ImportError; regenerate.sh there). Every failure log
classifies to its kind citing the line that says so; the logs that only mention these words (a
recovered OOM, NCCL_DEBUG=INFO chatter, a caught ImportError, TensorFlow's pinned-host retries)
classify to nothing or to what really ended the job."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from controller.model.failures import FIXES, classify

LOGS = Path(__file__).parent / "fixtures" / "failure_logs"


def lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


# (log, the line number and the start of the line that must be cited; no number: the last line that
# starts so, where regenerate.sh's ranks interleave differently from run to run)
FAILURES = {
    "CUDAOutOfMemory": [
        ("cuda_oom-1.log", 3, "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 496.00 MiB"),
        ("cuda_oom-2.log", 1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 GiB"),
        ("cuda_oom-3.log", 1, "RuntimeError: CUDA out of memory. Tried to allocate 74.00 MiB (GPU 0;"),
        ("cuda_oom-4.log", 1, "RuntimeError: CUDA error: out of memory"),
        ("cuda_oom-5.log", 7, "torch.AcceleratorError: CUDA error: out of memory"),
        ("cuda_oom-6.log", 11, "numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc"),
        ("cuda_oom-7.log", 1, "[KeOps] error: cuMemAlloc"),
        ("cuda_oom-8.log", 1, "Exception in main training loop: Out of memory allocating 25,600,000 bytes"),
        ("cuda_oom-9.log", 8, "Exception in main training loop: out of memory to allocate 163840000 bytes"),
        ("cuda_oom-10.log", 1, "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory"),
        ("cuda_oom-11.log", 5, "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory"),
        ("cuda_oom-13.log", 5, "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling"),
        ("cuda_oom-12.log", 4, "2022-08-21 00:29:47 | WARNING | metaseq.trainer | OOM: Ran out of memory"),
    ],
    "NCCLTimeout": [
        ("nccl_timeout-1.log", 5, "[rank2]:[E626 06:24:44.173078629 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog"),
        ("nccl_timeout-2.log", 5, "[E ProcessGroupNCCL.cpp:737] [Rank 7] Watchdog caught collective"),
        ("nccl_timeout-3.log", 5, "[E ProcessGroupNCCL.cpp:458] [Rank 7] Watchdog caught collective"),
        ("nccl_timeout-4.log", 5, "[rank5]:[E1002 18:16:40.692598448 ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog"),
        ("nccl_timeout-5.log", 5, "[rank2]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 2] Heartbeat monitor timed out!"),
        ("nccl_timeout-6.log", 2, "  what():  [PG 1 Rank 6] Process group watchdog thread terminated"),
        ("nccl_timeout-7.log", 6, "[rank3]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank 3] Timeout at NCCL work: 4084"),
        ("nccl_timeout-8.log", 18, "[rank0]:[E820 11:47:24.069865760 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog"),
        ("nccl_timeout-9.log", 7, "[E ProcessGroupNCCL.cpp:916] [Rank 1] NCCL watchdog thread terminated"),
    ],
    "NCCLError": [
        ("nccl_error-1.log", 6, "[rank3]: ncclRemoteError: A call failed possibly due to a network error"),
        ("nccl_error-2.log", 2, "ncclRemoteError: A call failed possibly due to a network error"),
        ("nccl_error-3.log", 12, "ncclUnhandledCudaError: Call to CUDA function failed."),
    ],
    "MissingModule": [
        ("missing_module-1.log", 6, "ModuleNotFoundError: No module named 'deepspeed_not_installed_here'"),
        ("missing_module-2.log", 6, "ImportError: cannot import name 'Mapping' from 'collections'"),
        ("missing_module-3.log", 6, "ModuleNotFoundError: No module named 'wandb_not_installed_here'"),
        ("missing_module-4.log", None, "ModuleNotFoundError: No module named 'apex_not_installed_here'"),
        ("missing_module-5.log", None, "[default1]:ModuleNotFoundError: No module named 'apex_not_installed_here'"),
    ],
    "OOMKilled": [
        ("host_oom-2.log", 2, "["),  # the kernel's "Memory cgroup out of memory: Killed process N (python3)"
        ("host_oom-3.log", 8, "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator"),
        ("host_oom-4.log", 4, "MemoryError"),
    ],
    "GPUXid": [
        ("xid-1.log", 5, "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828"),
        ("xid-2.log", 3, "Feb 15 17:37:45 Gipfeli kernel: [82659.755940] NVRM: Xid (PCI:0000:41:00): 13,"),
        ("xid-3.log", 3, "kernel: NVRM: Xid (PCI:0000:ba:00): 45, pid=1818989, name=python3"),
        ("xid-4.log", 5, "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"),
    ],
}
CASES = [(reason, log, line, text) for reason, logs in FAILURES.items() for log, line, text in logs]


@pytest.mark.parametrize("reason, log, line, text", CASES, ids=[c[1] for c in CASES])
def test_each_real_failure_log_names_its_cause_and_cites_the_line_that_says_so(reason, log, line, text):
    if line is None:
        line = max(n for n, t in enumerate(lines(log), 1) if t.startswith(text))
    found = classify(1, None, 0, (), lines(log))
    assert found.reason == reason, (log, found)
    cited = [e for e in found.evidence if e.startswith("log line ")]
    assert cited == [f"log line {line}: {lines(log)[line - 1].rstrip()[:500]}"], cited
    assert cited[0].startswith(f"log line {line}: {text}")
    assert FIXES[reason].split(":")[0] in found.message or reason == "GPUXid"


def test_the_kernels_oom_kill_line_names_the_killed_process():
    found = classify(137, None, 0, (), lines("host_oom-2.log"))
    assert "Memory cgroup out of memory: Killed process" in found.evidence[-1] and "(python3)" in found.evidence[-1]


def test_an_xid_quoted_from_the_kernel_log_gets_the_fix_for_that_xid():
    own = classify(1, None, 0, (), lines("xid-2.log"))  # Xid 13: the job's own kernel faulted
    assert "Xid 13 (graphics engine exception" in own.message and "CUDA_LAUNCH_BLOCKING=1" in own.message
    bus = classify(1, None, 0, (), lines("xid-4.log"))
    assert "Xid 79 (GPU has fallen off the bus)" in bus.message and "nvidia-smi -r" in bus.message


def test_nvmls_xids_come_before_a_log_that_quotes_the_kernel():
    found = classify(1, None, 0, [(2, 79)], lines("xid-2.log"))
    assert found.reason == "GPUXid" and found.message.startswith("GPU 2 reported Xid 79")


def test_a_real_segfault_is_named_by_its_signal_or_its_shells_exit_code_and_cites_the_shells_line():
    log = lines("segfault-1.log")  # bash: line 1: PID Segmentation fault      python3 -X faulthandler train.py
    for exit_code, sig in ((139, None), (None, signal.SIGSEGV)):
        found = classify(exit_code, sig, 0, (), log)
        assert found.reason == "Segfault", found
        assert found.evidence[-1] == f"log line 11: {log[10]}" and "Segmentation fault" in log[10]
    bare = classify(None, signal.SIGSEGV, 0, (), lines("segfault-2.log"))  # no shell, no faulthandler
    assert bare.reason == "Segfault" and bare.evidence == ("exit code None, killed by SIGSEGV",)


def test_a_real_host_oom_kill_is_the_cgroups_count_not_the_shells_killed_line():
    log = lines("host_oom-1.log")  # bash: line 1: PID Killed                  python3 train.py
    assert classify(137, None, 1, (), log).reason == "OOMKilled"
    # SIGKILL alone is also a time limit, a preemption, a kill -9: not evidence of memory
    assert classify(137, None, 0, (), log).reason == ""


def test_a_missing_module_whose_handler_failed_in_turn_is_still_the_missing_module():
    """missing_module-3.log: the ImportError's handler raised a NameError (one chained traceback)."""
    found = classify(1, None, 0, (), lines("missing_module-3.log"))
    assert found.reason == "MissingModule", found


# false positives: logs that mention these words, from jobs that did not die of them


@pytest.mark.parametrize(
    "log",
    [
        "oom_recovered-1.log",
        "oom_recovered-3.log",
        "nccl_info-1.log",
        "tf_host_pinned-1.log",
        "torchrun_child_failed-1.log",
    ],
)
def test_a_log_that_only_mentions_a_failure_names_none(log):
    """fairseq's "ran out of memory ... Skipping batch" (it went on), NCCL_DEBUG=INFO's chatter
    (return codes, "Connection closed by localRank"), TensorFlow retrying pinned host memory
    smaller, torchrun reporting its ranks' SIGABRT: the job that then exits non-zero without a
    traceback is Error, not these."""
    assert classify(1, None, 0, (), lines(log)).reason == "", log


def test_a_recovered_oom_then_another_exception_is_that_exception():
    # fairseq: THCudaCheck FAIL ... out of memory, "skipping batch", then an AttributeError
    assert classify(1, None, 0, (), lines("oom_recovered-2.log")).reason == ""


def test_a_caught_import_error_is_not_the_failure():
    assert classify(0, None, 0, (), lines("caught_import_error-1.log")).reason == ""  # it finished
    # the same job, dead of a KeyError after the epochs: the KeyError's traceback is the failure
    assert classify(1, None, 0, (), lines("caught_import_error-2.log")).reason == ""


def test_a_caught_import_error_then_an_exit_1_without_a_traceback_is_not_a_missing_module():
    """caught_import_error-3.log: the optional import's traceback, printed and survived, is the
    only one in the log; the job went on and gave up later (exit 1, no traceback of its own)."""
    log = lines("caught_import_error-3.log")
    assert classify(1, None, 0, (), log).reason == ""
    # the same traceback where it did end the program (nothing after it): the missing module
    ended = log[: log.index("ModuleNotFoundError: No module named 'apex_amp_not_installed'") + 1]
    assert classify(1, None, 0, (), ended).reason == "MissingModule"


def test_a_missing_modules_message_that_starts_on_the_next_line_still_ended_the_program():
    """numpy's ImportError ("ImportError: " then its advice on the following lines)."""
    log = ["Traceback (most recent call last):", '  File "t.py", line 1, in <module>', "ImportError: ", ""]
    log += ["IMPORTANT: PLEASE READ THIS FOR ADVICE ON HOW TO SOLVE THIS ISSUE!", "", "Original error was: ..."]
    assert classify(1, None, 0, (), log).reason == "MissingModule"


def test_the_last_match_wins_a_recovered_oom_then_a_real_nccl_timeout():
    log = lines("oom_recovered-1.log") + ["epoch 3 loss 0.91"] + lines("nccl_timeout-2.log")
    assert classify(1, None, 0, (), log).reason == "NCCLTimeout"
    # and NCCL_DEBUG=INFO spam after a real OOM does not hide it
    log = lines("cuda_oom-2.log") + lines("nccl_info-1.log")
    assert classify(1, None, 0, (), log).reason == "CUDAOutOfMemory"


def test_an_nccl_errors_watchdog_lines_do_not_make_it_a_timeout():
    """torch prints "Exception (either an error or timeout) detected by watchdog" and "Some NCCL
    operations have failed or timed out" for an NCCL error as for a timeout: only the error names it."""
    log = [line for line in lines("nccl_timeout-1.log") if "either an error or timeout" in line]
    log.append("[rank0]:[E ProcessGroupNCCL.cpp:577] [Rank 0] Some NCCL operations have failed or timed out.")
    assert classify(1, None, 0, (), log).reason == ""
    assert classify(1, None, 0, (), log + lines("nccl_error-2.log")).reason == "NCCLError"
    thrown = "terminate called after throwing an instance of 'c10::DistBackendError'"
    assert classify(1, None, 0, (), [thrown]).reason == ""


@pytest.mark.parametrize(
    "line",
    [  # the lines commit 178d33c classified (the driver API via numba, CuPy's own exception)
        "numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY",
        "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 8,589,934,592 bytes (allocated so far: 0 bytes).",
        "cupy.cuda.memory.OutOfMemoryError: out of memory to allocate 1073741824 bytes (total 12373894656 bytes)",
        "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/generic/THCStorage.cu:58",
    ],
)
def test_the_driver_apis_cupys_and_old_pytorchs_out_of_memory_lines(line):
    assert classify(1, None, 0, (), [line]).reason == "CUDAOutOfMemory"


def test_every_real_log_is_listed_with_its_source():
    sources = (LOGS / "SOURCES.md").read_text()
    for log in sorted(LOGS.glob("*.log")):
        assert f"`{log.name}`" in sources, log.name
