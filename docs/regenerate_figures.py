"""Regenerate the simulator figures of the README and the site: docs/img/*.png and the text beside them.

    python docs/regenerate_figures.py [--work DIR] [--no-dashboard]

Runs, in DIR (default: a new temporary directory, so the docs' paths read ``runs/...``):

* ``rlhooks simulate`` (the demo: its terminal output for the README and the tutorial, its report's overview chart
  -> docs/img/report.png) and the same with ``--seed 1 --set run.name=seed1``;
* ``rlhooks dashboard runs/demo runs/seed1`` in headless Chromium (selenium, the ``[dashboard]``
  and ``[test]`` extras and Debian's chromium + chromium-driver) -> docs/img/dashboard.png;
* the ``--compare`` commands of docs/how-to/selective-rollout.md: uniform / curriculum / dapo, and dapo / dapo_adaptive /
  selective / learnability at the default target and at 0.7 (its chart ->
  docs/img/selective_comparison.png).

Text outputs are printed (and kept in DIR/*.txt) for pasting into the README and the pages; the PNGs are copied.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMG = REPO / "docs" / "img"
EXAMPLES = REPO / "examples" / "configs"
RLHOOKS = [sys.executable, "-m", "rlhooks.cli"]


def run(work: Path, name: str, args: list[str]) -> str:
    """One rlhooks command in ``work``; its stdout and stderr together (what a terminal shows)."""
    out = subprocess.run([*RLHOOKS, *args], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=True).stdout
    (work / f"{name}.txt").write_text(out)
    print(f"$ rlhooks {' '.join(args)}\n{out}")
    return out


def dashboard_screenshot(work: Path, target: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (work / "dashboard.log").open("w")
    proc = subprocess.Popen([*RLHOOKS, "dashboard", "runs/demo", "runs/seed1", "--port", str(port)], cwd=work,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.read() == b"ok":
                        break
            except OSError:
                time.sleep(0.5)
        opts = Options()
        opts.binary_location = shutil.which("chromium") or "chromium"
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1500,1150"):
            opts.add_argument(a)
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=opts)
        try:
            driver.get(url)
            for _ in range(120):  # every overview plot drawn
                n = driver.execute_script("return document.querySelectorAll('.js-plotly-plot .scatterlayer .trace').length")
                if n >= 10:
                    break
                time.sleep(0.5)
            time.sleep(2)
            driver.execute_script("window.scrollTo(0, 0)")
            driver.save_screenshot(str(target))
        finally:
            driver.quit()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
        log.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, help="working directory (default: a new temporary one)")
    p.add_argument("--no-dashboard", action="store_true", help="leave docs/img/dashboard.png alone")
    args = p.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="rlhooks-figures-"))
    work.mkdir(parents=True, exist_ok=True)
    run(work, "demo", ["simulate", "--no-progress"])
    shutil.copy(work / "runs" / "demo" / "report" / "overview.png", IMG / "report.png")
    run(work, "seed1", ["simulate", "--no-progress", "--no-report", "--seed", "1", "--set", "run.name=seed1"])
    if not args.no_dashboard:
        dashboard_screenshot(work, IMG / "dashboard.png")
    def ex(*names: str) -> list[str]:
        return [str(EXAMPLES / f"{n}.yaml") for n in names]

    run(work, "compare_curriculum", ["simulate", "--no-progress", "--no-report", "--compare", *ex("uniform", "curriculum", "dapo")])
    selective = ex("dapo", "dapo_adaptive", "selective", "learnability")
    run(work, "compare_selective", ["simulate", "--no-progress", "--no-report", "--compare", *selective])
    shutil.copy(work / "runs" / "compare" / "generated_vs_accuracy.png", IMG / "selective_comparison.png")
    run(work, "compare_selective_07", ["simulate", "--no-progress", "--no-report", "--out", "runs07", "--target-accuracy", "0.7",
                                       "--compare", *selective])
    print(f"outputs in {work}; PNGs copied to {IMG}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
