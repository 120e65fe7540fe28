"""The web dashboard in a real headless browser: Debian's chromium driven through chromedriver
(Selenium), against a real gflowd on fake GPUs. Never downloads a browser: ``.ci/run`` installs
``chromium chromium-driver`` with apt; elsewhere the test skips and says how to get them."""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from helpers import wait_for, wait_phase, write_manifest
from test_web_e2e import XSS, held_job  # the same jobs the HTTP tests use

GPUS = """\
gpus:
  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}
  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi, processes: [{pid: 4242, usedMemory: 4Gi}]}
  - {name: NVIDIA A100-SXM4-40GB, memory: 40Gi}
"""
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # root (CI) has no sandbox
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
]


def _unavailable(why: str):
    how = "apt-get install chromium chromium-driver (as root; .ci/run does it)"
    if os.environ.get("GFLOW_REQUIRE_BROWSER"):  # set by .ci/run where it could install them
        pytest.fail(f"{why}: {how}")
    pytest.skip(f"no browser for the dashboard test ({why}); to run it: {how}")


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not chromium or not driver_path:
        _unavailable("chromium or chromedriver is not installed")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("the selenium package is missing (pip install -e '.[test]')")
    profile = tempfile.mkdtemp(prefix="gflow-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console errors, CSP violations
    # explicit driver and browser paths: Selenium Manager has nothing to look up or download
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(autouse=True)
def _leave_the_page(request):
    """After each test the browser leaves its dashboard for a blank page: a page left open keeps
    polling a gflowd that the test's teardown stops, and its refused requests would be logged as
    the next test's console errors."""
    yield
    if "browser" in request.fixturenames:
        driver = request.getfixturevalue("browser")
        driver.get("about:blank")
        driver.get_log("browser")  # drained


def console_errors(driver) -> list[str]:
    """SEVERE console messages of the page now open, leaving out those about another origin (a
    page of an earlier test, whose gflowd is gone, may still log a refused request)."""
    origin = js(driver, "return location.origin")
    return [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and ("://" not in e["message"] or origin in e["message"])
    ]


def until(driver, condition, message: str, timeout: float = 20):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: condition(d), message)


def js(driver, script: str, *args):
    return driver.execute_script(script, *args)


def text_of(driver, selector: str) -> str | None:
    return js(driver, "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;", selector)


def start_with_dashboard(gflowd, tmp_path: Path):
    """A gflowd on the fake GPUs with its dashboard on a free port, and a folder whose files
    release the ``held_job``s."""
    fake = tmp_path / "gpus.yaml"
    fake.write_text(GPUS)
    release = tmp_path / "release"
    release.mkdir()
    return gflowd("--fake-gpus", fake, "--web-port", "0"), release


def test_dashboard_renders_gpus_queue_reasons_timeline_live_and_escaped(browser, home, gflowd, tmp_path):
    daemon, release = start_with_dashboard(gflowd, tmp_path)
    write_manifest(home / "jobs", "train.yaml", held_job("train", 1, release))
    wait_phase(home, "train", "Running", daemon=daemon)
    write_manifest(home / "jobs", "big.yaml", held_job("big", 2, release))
    write_manifest(
        home / "jobs",
        "xss.yaml",
        f"metadata: {{name: xss}}\nspec:\n  resources: {{gpus: 1, gpuType: {json.dumps(XSS)}}}\n  command: [sleep, '1']\n",
    )
    wait_phase(home, "big", "Pending", reason="Resources", daemon=daemon)
    wait_phase(home, "xss", "Pending", reason="Unschedulable", daemon=daemon)
    url = json.loads((home / "run" / "web.json").read_text())["url"]

    browser.get(url)
    until(
        browser,
        lambda d: js(
            d,
            "return document.body.dataset.ready === '1' && "
            "document.querySelectorAll('#queue tr[data-job]').length === 2",
        ),
        "the dashboard to render the queue",
    )

    # GPU rows: one per GPU, with state, memory and jobs
    assert js(browser, "return document.querySelectorAll('#gpus tbody tr[data-gpu]').length") == 3
    gpu0 = text_of(browser, '#gpus tr[data-gpu="0"]')
    assert "NVIDIA H100 80GB HBM3" in gpu0 and "Allocated" in gpu0 and "train" in gpu0 and "0.0 / 80.0 GiB" in gpu0
    gpu1 = text_of(browser, '#gpus tr[data-gpu="1"]')
    assert "Unmanaged" in gpu1 and "4.0 / 80.0 GiB" in gpu1 and "1 foreign process" in gpu1
    assert "Free" in text_of(browser, '#gpus tr[data-gpu="2"]')

    # the queue with each pending job's reason and message
    big = text_of(browser, '#queue tr[data-job="big"]')
    assert "Resources" in big and "needs 2 GPUs, 1 free" in big
    assert "Unschedulable" in text_of(browser, '#queue tr[data-job="xss"]')
    assert "train" in text_of(browser, '#running tr[data-job="train"]')
    assert (
        js(
            browser,
            'return document.querySelector(\'#timeline .tl-row[data-gpu="0"] .tl-bar[data-job="train"]\').className',
        )
        == "tl-bar Running"
    )
    # a bar of a few seconds in a 6-hour window is still drawn inside its track, at its right end
    bar, track = js(
        browser,
        "const b = document.querySelector('.tl-bar[data-job=\"train\"]');"
        "return [b.getBoundingClientRect().toJSON(), b.parentElement.getBoundingClientRect().toJSON()]",
    )
    assert bar["width"] >= 2 and track["left"] <= bar["left"] and bar["right"] <= track["right"] + 0.5, (bar, track)
    assert bar["right"] >= track["right"] - 2

    # a job-provided string with markup is shown as text: no element was made from it, nothing ran
    message = text_of(browser, '#queue tr[data-job="xss"] td.msg')
    assert XSS in message, message
    assert js(browser, "return document.querySelectorAll('img').length") == 0
    assert js(browser, "return document.scripts.length") == 1
    assert js(browser, "return window.__pwned === undefined") is True

    # live: the page follows gflowd without a reload
    (release / "train").touch()
    wait_phase(home, "train", "Succeeded", daemon=daemon)
    until(
        browser,
        lambda d: js(
            d,
            'const b = document.querySelector(\'.tl-row[data-gpu="0"] .tl-bar[data-job="train"]\');'
            "return b && b.className === 'tl-bar Succeeded'",
        ),
        "train's timeline bar to turn Succeeded",
    )
    until(
        browser,
        lambda d: (
            text_of(d, '#running tr[data-job="big"]') is not None and text_of(d, '#queue tr[data-job="big"]') is None
        ),
        "big to move from the queue to running",
    )
    assert js(browser, "return document.querySelectorAll('.tl-bar[data-job=\"big\"]').length") == 2  # GPUs 0 and 2
    assert js(browser, "return document.title") == "gflow · 1 running · 1 pending"

    # no console errors: in particular no Content-Security-Policy violation (the policy lets the
    # page's own script run by its hash, so a wrong hash would show here and nothing would render)
    errors = console_errors(browser)
    assert errors == [], errors

    shot = tmp_path / "dashboard.png"
    assert browser.save_screenshot(str(shot))
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width >= 1000 and height >= 700 and len(png) > 20_000  # a rendered page, not a blank one
    if os.environ.get("GFLOW_SCREENSHOT_DIR"):  # keep it to look at
        shutil.copy(shot, Path(os.environ["GFLOW_SCREENSHOT_DIR"]) / "dashboard-test.png")
    (release / "big").touch()


def test_dashboard_shows_control_characters_escaped_and_the_api_keeps_them(browser, home, gflowd, tmp_path):
    from test_web_e2e import dashboard_address, state

    fake = tmp_path / "gpus.yaml"
    fake.write_text(GPUS)
    daemon = gflowd("--fake-gpus", fake, "--web-port", "0")
    nasty = "H\x1b[2J\x1b]0;pwned\x07100\nforged row\u202e"  # clear screen, set the title, a newline, RTL override
    write_manifest(
        home / "jobs",
        "ctrl.yaml",
        f"metadata: {{name: ctrl}}\nspec:\n  resources: {{gpus: 1, gpuType: {json.dumps(nasty)}}}\n  command: [sleep, '1']\n",
    )
    wait_phase(home, "ctrl", "Pending", reason="Unschedulable", daemon=daemon)
    # the API keeps the exact data; it reads the index, written just after the status files
    address = dashboard_address(daemon)
    wait_for(lambda: any(nasty in q["message"] for q in state(address)["queue"]), message="ctrl in the API's queue")

    browser.get(json.loads((home / "run" / "web.json").read_text())["url"])
    until(browser, lambda d: text_of(d, '#queue tr[data-job="ctrl"] td.msg') is not None, "the queue row of ctrl")
    message = text_of(browser, '#queue tr[data-job="ctrl"] td.msg')
    assert r"H\x1b[2J\x1b]0;pwned\x07100\nforged row\u202e" in message, message
    assert not [c for c in message if not c.isprintable()], repr(message)
    events = text_of(browser, "#events")
    assert r"\x1b[2J" in events and "\x1b" not in events


def test_owner_devices_filter_folded_events_and_the_job_page(browser, home, gflowd, tmp_path):
    import pwd

    daemon, release = start_with_dashboard(gflowd, tmp_path)
    write_manifest(
        home / "jobs",
        "chatty.yaml",
        "metadata: {name: chatty}\nspec:\n  resources: {gpus: 1}\n"
        "  script: printf 'hello <b>world</b>\\n\\033[31mred\\n'\n",
    )
    wait_phase(home, "chatty", "Succeeded", daemon=daemon)
    write_manifest(home / "jobs", "hold.yaml", held_job("hold", 1, release))
    wait_phase(home, "hold", "Running", daemon=daemon)
    write_manifest(home / "jobs", "waiter.yaml", held_job("waiter", 3, release))
    wait_phase(home, "waiter", "Pending", reason="Resources", daemon=daemon)
    # a flood of one identical event, as events.jsonl holds them (one JSON object a line)
    flood = (
        json.dumps(
            {
                "time": "2027-01-15T08:00:00.000Z",
                "type": "Normal",
                "reason": "Resources",
                "object": "job/waiter",
                "message": "needs 3 GPUs, 2 free",
            }
        )
        + "\n"
    )
    with open(home / "events.jsonl", "a") as events:
        events.write(flood * 1500)
    me = pwd.getpwuid(os.getuid()).pw_name
    browser.get(json.loads((home / "run" / "web.json").read_text())["url"])
    until(
        browser,
        lambda d: js(
            d,
            "return document.body.dataset.ready === '1' && "
            "document.querySelector('#events tr[data-count=\"1500\"]') !== null",
        ),
        "the dashboard with the folded flood of events",
    )

    # honest headers and an owner column
    assert js(browser, "return [...document.querySelectorAll('#running th')].map(t => t.textContent)") == [
        "Job",
        "Owner",
        "Devices",
        "Priority",
        "Attempt",
        "For",
        "Message",
    ]
    assert text_of(browser, '#running tr[data-job="hold"]').startswith(f"hold{me}")
    assert me in text_of(browser, '#queue tr[data-job="waiter"]')
    # 1,500 identical events are one row that says so
    flood_rows = js(
        browser,
        "return [...document.querySelectorAll('#events tbody tr')].filter(r => r.textContent.includes('needs 3 GPUs, 2 free')).map(r => r.textContent)",
    )
    assert len(flood_rows) == 1 and "×1500" in flood_rows[0], flood_rows
    # the timeline fits the jobs: no fixed 6 hours
    assert js(browser, "return document.getElementById('hours').value") == "fit"

    # the filter box narrows every list
    box = browser.find_element("id", "filter")
    box.send_keys("waiter")
    until(
        browser,
        lambda d: js(d, "return document.querySelectorAll('#running tr[data-job]').length") == 0,
        "the filter to hide the running job",
    )
    assert text_of(browser, "#running tbody") == "No running job matches the filter."
    assert js(browser, "return [...document.querySelectorAll('#queue tr[data-job]')].map(r => r.dataset.job)") == [
        "waiter"
    ]
    assert js(browser, "return document.querySelector('.tl-bar[data-job=\"hold\"]').classList.contains('dim')") is True
    box.clear()
    box.send_keys(me + " running")
    until(
        browser,
        lambda d: (
            js(d, "return [...document.querySelectorAll('#running tr[data-job]')].map(r => r.dataset.job).join()")
            == "hold"
            and js(d, "return document.querySelectorAll('#queue tr[data-job]').length") == 0
        ),
        "owner + phase filter",
    )
    js(browser, "const f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input'));")

    # every row links to the job's page: describe + log tail
    js(browser, "document.querySelector('#queue tr[data-job=\"waiter\"] a.job-link').click()")
    until(browser, lambda d: js(d, "return document.body.dataset.job") == "waiter", "the job page of waiter")
    assert js(browser, "return document.getElementById('overview').hidden") is True
    assert text_of(browser, '#job-fields dd[data-field="Reason"]') == "Resources"
    assert text_of(browser, "#job-owner") == f"owner {me}"
    assert "×1500" in text_of(browser, "#job-events") and text_of(browser, "#job-log") == "(no log yet)"
    js(browser, "location.hash = '#job/chatty'")
    until(browser, lambda d: js(d, "return document.body.dataset.job") == "chatty", "the job page of chatty")
    log = text_of(browser, "#job-log")
    assert log == "hello <b>world</b>\n\\x1b[31mred\n", repr(log)  # markup as text, the escape shown, lines kept
    assert js(browser, "return document.querySelectorAll('#job-log *').length") == 0
    assert text_of(browser, '#job-fields dd[data-field="Exit code"]') == "0"
    assert "Succeeded" in text_of(browser, '#job-fields dd[data-field="Phase"]')
    js(browser, "location.hash = '#job/nope'")
    until(browser, lambda d: js(d, "return !document.getElementById('job-missing').hidden"), "no job of that name")
    js(browser, "document.getElementById('job-back').click()")
    until(browser, lambda d: js(d, "return !document.getElementById('overview').hidden"), "back to the overview")
    errors = console_errors(browser)
    assert [m for m in errors if "api/job?name=nope - " not in m] == [], errors  # that 404 is the answer asked for
    (release / "hold").touch()
    (release / "waiter").touch()


def test_a_running_bar_shows_its_gpu_utilization_and_recent_samples(browser, home, gflowd, tmp_path):
    from helpers import job_status, wait_for
    from test_gpu_usage_e2e import write_gpus

    fake = tmp_path / "gpus.yaml"
    write_gpus(fake, [])
    release = tmp_path / "release"
    release.mkdir()
    daemon = gflowd("--fake-gpus", fake, "--web-port", "0", "--gpu-sample-interval", "0.5s")
    write_manifest(home / "jobs", "train.yaml", held_job("train", 1, release))
    pid = wait_for(lambda: (s := job_status(home, "train")) and s.get("pid"), message="train's pid")
    write_gpus(fake, [{"pid": pid, "usedMemory": "8Gi", "utilization": 70}])
    wait_for(
        lambda: (job_status(home, "train") or {}).get("gpuUsage"), timeout=20, message=lambda: daemon.stderr()[-2000:]
    )
    browser.get(json.loads((home / "run" / "web.json").read_text())["url"])
    # the line of samples inside the bar: two or more points, the newest at 70 % (y = 100 - 70)
    points = until(
        browser,
        lambda d: js(
            d,
            "const p = document.querySelector('.tl-bar[data-job=\"train\"] svg.tl-util polyline');"
            "return p && p.getAttribute('points').split(' ').length >= 2 && p.getAttribute('points')",
        ),
        "the bar to draw its utilization samples",
    )
    assert points.split(" ")[-1].endswith(",30.0"), points
    assert "mean GPU utilization" in js(browser, "return document.querySelector('.tl-bar[data-job=\"train\"]').title")
    (release / "train").touch()


def test_the_timeline_draws_a_reservation_window_behind_the_bars(browser, home, gflowd, tmp_path):
    import pwd

    daemon, _ = start_with_dashboard(gflowd, tmp_path)
    me = pwd.getpwuid(os.getuid()).pw_name
    write_manifest(
        home / "jobs",
        "hold.yaml",
        f"kind: Reservation\nmetadata: {{name: hold}}\nspec:\n  users: [{me}]\n"
        "  devices: [2]\n  start: '+0s'\n  duration: 1h\n",
    )
    write_manifest(
        home / "jobs",
        "soon.yaml",
        f"kind: Reservation\nmetadata: {{name: soon}}\nspec:\n  users: [{me}]\n"
        "  devices: [0]\n  start: '+2h'\n  duration: 1h\n",
    )
    browser.get(json.loads((home / "run" / "web.json").read_text())["url"])
    browser.get_log("browser")  # drained: what the previous test's page logged as its gflowd went away is not ours
    until(
        browser,
        lambda d: js(
            d, 'return document.querySelector(\'.tl-row[data-gpu="2"] .tl-reserved[data-reservation="hold"]\') !== null'
        ),
        "the reservation's band on GPU 2",
    )
    band, track = js(
        browser,
        "const b = document.querySelector('.tl-reserved[data-reservation=\"hold\"]');"
        "return [b.getBoundingClientRect().toJSON(), b.parentElement.getBoundingClientRect().toJSON()]",
    )
    assert track["left"] <= band["left"] and band["right"] <= track["right"] + 0.5, (band, track)
    assert band["right"] >= track["right"] - 2  # it began moments ago and runs on past the window's end
    title = js(browser, "return document.querySelector('.tl-reserved[data-reservation=\"hold\"]').title")
    assert title.startswith(f"reserved for {me} · ") and "(hold, Active)" in title
    assert js(
        browser,
        'return document.querySelector(\'.tl-row[data-gpu="0"] .tl-reserved.upcoming[data-reservation="soon"]\') !== null',
    )
    assert js(browser, "return document.querySelectorAll('.tl-row[data-gpu=\"1\"] .tl-reserved').length") == 0
    errors = console_errors(browser)
    assert errors == [], errors
    assert daemon.proc.poll() is None
