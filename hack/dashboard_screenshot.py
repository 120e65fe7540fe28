#!/usr/bin/env python3
"""Take docs/img/dashboard.png (and dashboard-job.png): a real gflowd on 4 fake GPUs runs a scripted
mix of jobs for about two minutes (training runs, evaluations, a sweep, a retried failure, a job too
big to fit, a rejected manifest), then Debian's chromium (Selenium + chromedriver, as the browser
test uses) photographs the dashboard and one job's page.

    .venv/bin/python hack/dashboard_screenshot.py [--out docs/img] [--seconds 120]

Everything it starts is stopped on exit; the temp home is removed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPUS = "gpus:\n" + "".join("  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n" for _ in range(4))


def job(name: str, gpus: int, script: str, extra: str = "") -> str:
    return (
        f"apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {{name: {name}, labels: {{team: vision}}}}\n"
        f"spec:\n  resources: {{gpus: {gpus}}}\n  script: |\n    {script}\n{extra}"
    )


SCENE = [  # (seconds after start, file name, manifest)
    (
        0,
        "train-resnet.yaml",
        job("train-resnet", 2, "for i in $(seq 1 400); do echo step $i loss 0.$((400 - i)); sleep 0.5; done"),
    ),
    (0, "eval-a.yaml", job("eval-a", 1, "echo evaluating; sleep 25; echo top1 0.81")),
    (
        2,
        "flaky.yaml",
        job("flaky", 1, "echo try; sleep 8; echo CUDA error: out of memory >&2; exit 1", "  backoffLimit: 1\n"),
    ),
    (
        5,
        "lr.yaml",
        "apiVersion: gflow.dev/v1alpha1\nkind: Sweep\nmetadata: {name: lr}\nspec:\n  parallelism: 2\n"
        "  template:\n    resources: {gpus: 1}\n    script: 'echo lr={lr}; sleep 20'\n  matrix:\n    lr: ['0.1', '0.01', '0.001']\n",
    ),
    (30, "train-vit.yaml", job("train-vit", 1, "for i in $(seq 1 400); do echo step $i; sleep 0.5; done")),
    (40, "big-llm.yaml", job("big-llm", 4, "sleep 600", "  priority: 5\n")),
    (
        45,
        "bad.yaml",
        "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {name: bad}\nspec:\n  command: [python, train.py]\n  resources: {gpus: -1}\n",
    ),
]


def _jobs_left(home: Path) -> int:
    try:
        return len(json.loads((home / "run" / "index.json").read_text()).get("jobs") or {})
    except (OSError, ValueError):
        return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"))
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    base = Path(tempfile.mkdtemp(prefix="gflow-shot-"))
    home = base / "home"
    (home / "jobs").mkdir(parents=True)
    (base / "gpus.yaml").write_text(GPUS)
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller.daemon",
            "--home",
            str(home),
            "--fake-gpus",
            str(base / "gpus.yaml"),
            "--web-port",
            "0",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
    )
    driver = None
    try:
        began = time.monotonic()
        for at, name, text in SCENE:
            time.sleep(max(0.0, began + at - time.monotonic()))
            (home / "jobs" / name).write_text(text)
        time.sleep(max(0.0, began + args.seconds - time.monotonic()))
        url = json.loads((home / "run" / "web.json").read_text())["url"]
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "chromium"
        for flag in (
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1400,1250",
            "--hide-scrollbars",
            f"--user-data-dir={base / 'profile'}",
        ):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
        driver.get(url)
        deadline = time.monotonic() + 20
        while driver.execute_script("return document.body.dataset.ready") != "1" and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out / "dashboard.png"))
        driver.execute_script("location.hash = '#job/flaky'")
        deadline = time.monotonic() + 20
        while driver.execute_script("return document.body.dataset.job") != "flaky" and time.monotonic() < deadline:
            time.sleep(0.1)
        driver.set_window_size(1400, 1450)  # the log tail too
        driver.save_screenshot(str(out / "dashboard-job.png"))
        print(f"wrote {out / 'dashboard.png'} and {out / 'dashboard-job.png'}")
    finally:
        if driver is not None:
            driver.quit()
        # gflowd leaves jobs running when it stops, on purpose: delete the manifests first, so it
        # stops the jobs itself, and wait until the index lists none
        for path in (home / "jobs").iterdir():
            path.unlink()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _jobs_left(home):
            time.sleep(0.2)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(15)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
