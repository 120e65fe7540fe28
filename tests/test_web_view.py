"""The dashboard's view (controller/web/view.py): literal state-file data in, what the page shows out."""

from __future__ import annotations

import pytest

from controller.client.read.usage import series_json
from controller.web.view import EVENTS_LIMIT, SERIES_POINTS, assign_lanes, build_view, timeline

NOW = 1_800_000_000.0
HOUR = 3600.0


def job(phase: str, **fields) -> dict:
    """An index row as run/index.json holds it (times are epoch seconds)."""
    return {"phase": phase, "reason": fields.pop("reason", ""), "message": fields.pop("message", ""), **fields}


def node(*gpus: dict) -> dict:
    return {
        "apiVersion": "gflow.dev/v1alpha1",
        "kind": "Node",
        "inventory": "fake GPUs from x.yaml",
        "gpus": list(gpus),
    }


def test_gpus_carry_memory_in_bytes_state_jobs_and_foreign_processes():
    view = build_view(
        node(
            {
                "index": 0,
                "name": "H100",
                "memory": "80Gi",
                "memoryUsed": "2Gi",
                "utilization": 35,
                "state": "Allocated",
                "jobs": ["a"],
            },
            {
                "index": 1,
                "name": "H100",
                "memory": "80Gi",
                "memoryUsed": "0",
                "state": "Unmanaged",
                "jobs": [],
                "processes": [{"pid": 1, "usedMemory": "4Gi"}, {"pid": 2, "usedMemory": "1Gi"}],
            },
            {"index": 2, "name": "A100", "memory": "lots", "state": "Unhealthy", "error": "NVML: GPU is lost"},
        ),
        {},
        [],
        NOW,
        6,
    )
    assert [
        (g["index"], g["state"], g["memory"], g["memoryUsed"], g["jobs"], g["foreignProcesses"]) for g in view["gpus"]
    ] == [
        (0, "Allocated", 80 * 2**30, 2 * 2**30, ["a"], 0),
        (1, "Unmanaged", 80 * 2**30, 0, [], 2),
        (2, "Unhealthy", None, None, [], 0),  # an unreadable quantity is shown as unknown, not a crash
    ]
    assert view["gpus"][0]["utilization"] == 35 and view["gpus"][2]["error"] == "NVML: GPU is lost"
    assert view["inventory"] == "fake GPUs from x.yaml"


def test_no_node_file_yet_is_an_empty_machine():
    view = build_view(None, {}, [], NOW, 6)
    assert view["gpus"] == [] and view["queue"] == [] and view["timeline"]["rows"] == []


def test_queue_is_in_scheduler_order_then_held_jobs_by_age_with_reason_and_message():
    jobs = {
        "held-new": job("Pending", reason="Dependency", message="waits for prep", created=NOW - 10),
        "second": job(
            "Pending",
            reason="Resources",
            message="needs 4 GPUs, 1 free",
            queuePosition=2,
            gpus=4,
            priority=1,
            created=NOW - 5,
        ),
        "first": job("Pending", reason="Priority", message="behind x", queuePosition=1, created=NOW - 1),
        "held-old": job("Pending", reason="Suspended", message="suspended", created=NOW - 100),
        "running": job("Running", startTime=NOW - 50, devices=[0]),
        "broken": job("Rejected", reason="Invalid", message="spec.resources.gpus: must be >= 0 (jobs/b.yaml line 9)"),
    }
    view = build_view(None, jobs, [], NOW, 6)
    assert [(q["name"], q["position"], q["reason"]) for q in view["queue"]] == [
        ("first", 1, "Priority"),
        ("second", 2, "Resources"),
        ("held-old", None, "Suspended"),
        ("held-new", None, "Dependency"),
    ]
    second = view["queue"][1]
    assert (second["message"], second["gpus"], second["priority"], second["created"]) == (
        "needs 4 GPUs, 1 free",
        4,
        1,
        NOW - 5,
    )
    assert view["queueTotal"] == 4
    assert view["counts"] == {"Pending": 4, "Running": 1, "Rejected": 1}
    assert view["attention"] == [
        {
            "name": "broken",
            "reason": "Invalid",
            "message": "spec.resources.gpus: must be >= 0 (jobs/b.yaml line 9)",
            "owner": "",
        }
    ]
    assert [r["name"] for r in view["running"]] == ["running"]


def test_running_jobs_oldest_first_with_devices_and_start():
    jobs = {
        "young": job("Running", startTime=NOW - 5, devices=[2, 3], gpus=2, attempt=2),
        "old": job("Running", startTime=NOW - 500, devices=[], gpus=0),
    }
    running = build_view(None, jobs, [], NOW, 6)["running"]
    assert [(r["name"], r["devices"], r["startTime"], r["attempt"]) for r in running] == [
        ("old", [], NOW - 500, 0),
        ("young", [2, 3], NOW - 5, 2),
    ]


def test_status_file_times_in_rfc3339_count_like_index_epochs():
    # without run/index.json the rows come from status files, whose times are RFC 3339 text
    jobs = {"a": job("Succeeded", startTime="2027-01-15T08:00:00Z", completionTime="2027-01-15T09:30:00Z", devices=[0])}
    end = 1800000000.0  # 2027-01-15T08:00:00Z
    tl = timeline(jobs, [0], end - 10 * HOUR, end + 2 * HOUR)
    (span,) = tl["rows"][0]["spans"]
    assert (span["start"], span["end"]) == (end, end + 1.5 * HOUR)


@pytest.mark.parametrize(
    "row, drawn",
    [
        (job("Running", startTime=NOW - 60, devices=[0]), [(0, NOW - 60, None)]),
        (
            job("Succeeded", startTime=NOW - 2 * HOUR, completionTime=NOW - HOUR, devices=[0, 1]),
            [(0, NOW - 2 * HOUR, NOW - HOUR), (1, NOW - 2 * HOUR, NOW - HOUR)],
        ),
        (
            job("Failed", startTime=NOW - 7 * HOUR, completionTime=NOW - 5 * HOUR, devices=[1]),
            [(1, NOW - 7 * HOUR, NOW - 5 * HOUR)],
        ),
        (
            job("Cancelled", startTime=NOW - 9 * HOUR, completionTime=NOW - 7 * HOUR, devices=[1]),
            [],
        ),  # ended before the window
        (job("Succeeded", startTime=NOW - 60, devices=[0]), []),  # finished without a recorded end
        (job("Pending", startTime=NOW - 60, devices=[]), []),  # a retry waiting to be bound again
        (job("Succeeded", startTime=NOW - 60, completionTime=NOW - 1, devices=[]), []),  # a CPU job: no GPU row
    ],
    ids=["running", "finished-two-gpus", "overlaps-window-start", "before-window", "no-end", "pending", "cpu"],
)
def test_which_jobs_make_a_bar_and_where(row, drawn):
    tl = timeline({"j": row}, [0, 1], NOW - 6 * HOUR, NOW)
    assert [(s["gpu"], s["start"], s["end"]) for r in tl["rows"] for s in r["spans"]] == drawn
    assert [r["gpu"] for r in tl["rows"]] == [0, 1]  # every GPU has a row, busy or not
    assert all(s["phase"] == row["phase"] for r in tl["rows"] for s in r["spans"])


def test_a_device_no_longer_in_the_inventory_still_gets_its_row():
    jobs = {"gone": job("Succeeded", startTime=NOW - 100, completionTime=NOW - 50, devices=[7])}
    assert [r["gpu"] for r in timeline(jobs, [0], NOW - HOUR, NOW)["rows"]] == [0, 7]


def test_shared_jobs_overlapping_on_a_gpu_get_separate_lanes_sequential_ones_share_one():
    jobs = {
        "a": job("Succeeded", startTime=NOW - 300, completionTime=NOW - 200, devices=[0]),
        "b": job("Running", startTime=NOW - 250, devices=[0]),  # overlaps a
        "c": job("Succeeded", startTime=NOW - 200, completionTime=NOW - 100, devices=[0]),  # starts as a ends
        "d": job("Succeeded", startTime=NOW - 100, completionTime=NOW - 10, devices=[1]),
    }
    rows = {r["gpu"]: r for r in timeline(jobs, [0, 1], NOW - HOUR, NOW)["rows"]}
    assert {s["job"]: s["lane"] for s in rows[0]["spans"]} == {"a": 0, "b": 1, "c": 0}
    assert rows[0]["lanes"] == 2 and rows[1]["lanes"] == 1


def test_bars_carry_mean_gpu_utilization_and_a_running_bar_its_recent_samples_per_gpu():
    jobs = {
        "ddp": {**job("Running", startTime=NOW - 600, devices=[0, 1]), "attempt": 2, "gpuUtil": 40.0},
        "old": {**job("Succeeded", startTime=NOW - 900, completionTime=NOW - 700, devices=[1]), "gpuUtil": 90.0},
        "cpu_less": job("Running", startTime=NOW - 60, devices=[2]),  # never sampled: no util, no series
    }
    series = [(NOW - 300 + 5 * k, [(k % 100, 1024), (0, 0)]) for k in range(150)]
    usage = {"jobs": {"ddp": series_json(series, [0, 1], since=NOW - 300, attempt=2)}}
    spans = {
        (s["job"], s["gpu"]): s for r in timeline(jobs, [0, 1, 2], NOW - HOUR, NOW, usage)["rows"] for s in r["spans"]
    }
    ddp0, ddp1 = spans[("ddp", 0)], spans[("ddp", 1)]
    assert ddp0["util"] == ddp1["util"] == 40.0 and spans[("old", 1)]["util"] == 90.0
    # 150 samples thinned to every 3rd, counted back from the newest (which is always drawn)
    assert len(ddp0["series"]) == 50 <= SERIES_POINTS and ddp0["series"][-1] == [NOW - 300 + 5 * 149, 49.0]
    assert ddp0["series"][:2] == [[NOW - 290, 2.0], [NOW - 275, 5.0]]
    assert {u for _, u in ddp1["series"]} == {0.0}  # the second GPU's own samples, not the first's
    assert (
        "series" not in spans[("old", 1)]
        and spans[("cpu_less", 2)]["util"] is None
        and spans[("cpu_less", 2)]["series"] == []
    )
    stale = {"jobs": {"ddp": series_json(series, [0, 1], since=NOW - 300, attempt=1)}}  # the previous attempt's samples
    assert timeline(jobs, [0], NOW - HOUR, NOW, stale)["rows"][0]["spans"][0]["series"] == []


def test_an_open_span_holds_its_lane():
    spans = [{"start": 0.0, "end": None}, {"start": 5.0, "end": 6.0}, {"start": 10.0, "end": 11.0}]
    assert assign_lanes(spans) == 2
    assert [s["lane"] for s in spans] == [0, 1, 1]


def test_identical_events_fold_into_one_row_with_their_count():
    flood = [
        {
            "time": f"2027-01-15T08:{i // 60:02d}:{i % 60:02d}.000Z",
            "type": "Normal",
            "reason": "Resources",
            "object": "job/big",
            "message": "needs 8 GPUs, 2 free",
        }
        for i in range(1500)
    ]
    other = {
        "time": "2027-01-15T09:00:00.000Z",
        "type": "Normal",
        "reason": "Started",
        "object": "job/small",
        "message": "m",
    }
    same_text_other_job = {**flood[0], "object": "job/big2", "time": "2027-01-15T07:00:00.000Z"}
    shown = build_view(None, {}, [same_text_other_job, *flood, other], NOW, 6)["events"]
    assert [(e["object"], e["reason"], e["count"]) for e in shown] == [
        ("job/small", "Started", 1),
        ("job/big", "Resources", 1500),
        ("job/big2", "Resources", 1),
    ]
    assert shown[1]["time"] == flood[-1]["time"]  # the row says when it last happened


def test_a_fitted_timeline_starts_just_before_the_earliest_job_there_is():
    jobs = {
        "running": job("Running", devices=[0], startTime=NOW - 20 * 60),
        "recent": job("Succeeded", devices=[1], startTime=NOW - 40 * 60, completionTime=NOW - 30 * 60),
        "last-week": job("Succeeded", devices=[1], startTime=NOW - 5 * 86400, completionTime=NOW - 5 * 86400 + 60),
        "cpu": job("Running", devices=[], startTime=NOW - 86400),  # no GPU: no bar, no say
    }
    view = build_view(None, jobs, [], NOW, None)
    assert view["timeline"]["fitted"] is True
    assert view["timeline"]["start"] == pytest.approx(NOW - 40 * 60 * 1.05)
    assert {s["job"] for r in view["timeline"]["rows"] for s in r["spans"]} == {"running", "recent"}
    assert build_view(None, {}, [], NOW, None)["timeline"]["start"] == NOW - HOUR  # nothing: the last hour
    just_begun = {"a": job("Running", devices=[0], startTime=NOW - 10)}
    assert build_view(None, just_begun, [], NOW, None)["timeline"]["start"] == NOW - 5 * 60  # at least 5 minutes
    ancient = {"a": job("Running", devices=[0], startTime=NOW - 30 * 86400)}
    assert build_view(None, ancient, [], NOW, None)["timeline"]["start"] == NOW - 7 * 86400  # at most 7 days
    assert build_view(None, jobs, [], NOW, 6)["timeline"]["start"] == NOW - 6 * HOUR  # a chosen window stays


def test_rows_carry_the_owner_of_their_manifest():
    jobs = {
        "p": job("Pending", queuePosition=1),
        "r": job("Running", devices=[0], startTime=NOW - 5),
        "x": job("Rejected", reason="Invalid"),
    }
    view = build_view(None, jobs, [], NOW, 6, owners={"p": "alice", "r": "bob"})
    assert [(q["name"], q["owner"]) for q in view["queue"]] == [("p", "alice")]
    assert [(q["name"], q["owner"]) for q in view["running"]] == [("r", "bob")]
    assert [(q["name"], q["owner"]) for q in view["attention"]] == [("x", "")]


def test_events_newest_first_and_limited():
    events = [
        {"time": f"t{i}", "type": "Normal", "reason": "Started", "object": f"job/j{i}", "message": "m"}
        for i in range(100)
    ]
    shown = build_view(None, {}, events, NOW, 6)["events"]
    assert len(shown) == EVENTS_LIMIT
    assert shown[0]["object"] == "job/j99" and shown[-1]["object"] == f"job/j{100 - EVENTS_LIMIT}"


def test_strings_are_passed_through_as_data_not_interpreted():
    message = "needs 1 GPU of type <script>alert(1)</script>"
    view = build_view(None, {"x": job("Pending", reason="Unschedulable", message=message, queuePosition=1)}, [], NOW, 6)
    assert view["queue"][0]["message"] == message  # escaping is the page's job (it sets text, never HTML)


def test_every_file_the_dashboard_serves_is_package_data():
    """A normal (non-editable) install carries only .py files unless pyproject lists the rest."""
    import fnmatch
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "controller.web"
    ]
    served = [
        p.name for p in (root / "controller" / "web").iterdir() if p.is_file() and p.suffix not in (".py", ".pyc")
    ]
    assert "dashboard.html" in served
    assert [name for name in served if not any(fnmatch.fnmatch(name, pat) for pat in patterns)] == []


def test_the_timeline_carries_reservation_windows_per_gpu():
    reservations = {
        "now": {"phase": "Active", "users": ["alice"], "devices": [0, 1], "start": NOW - HOUR, "end": NOW + HOUR},
        "later": {"phase": "Pending", "users": ["bob"], "devices": [1], "start": NOW + 5 * HOUR, "end": NOW + 6 * HOUR},
        "old": {
            "phase": "Expired",
            "users": ["carol"],
            "devices": [0],
            "start": NOW - 30 * HOUR,
            "end": NOW - 20 * HOUR,
        },
        "refused": {"phase": "Rejected", "users": ["dan"], "devices": [0], "start": NOW, "end": NOW + HOUR},
    }
    view = build_view(
        node({"index": 0, "state": "Free"}, {"index": 1, "state": "Free"}), {}, [], NOW, 6, reservations=reservations
    )
    rows = {r["gpu"]: r["reserved"] for r in view["timeline"]["rows"]}
    assert [(w["name"], w["users"], w["start"], w["end"]) for w in rows[0]] == [
        ("now", ["alice"], NOW - HOUR, NOW + HOUR)
    ]
    assert [w["name"] for w in rows[1]] == ["later", "now"]  # an upcoming window too: the page marks its edge
