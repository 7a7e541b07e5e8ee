"""The screenshots of issue 41, taken with Playwright and the system's Chromium (apt-get install chromium):
a sweep running in JupyterLab with its trial bar, explore run live on the memories set (its query box
searching a recency question), the report in JupyterLab and the static report top to bottom.

    .venv/bin/python reports/screenshots/shoot.py /tmp/shots    # then copy (and quantize) into reports/screenshots/

It runs a 60-trial memories sweep (nested CV, 10 trials per fold: about a minute on 2 cores) in a scratch
folder (a fresh temporary one); nothing is written into the checkout.
"""
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import papermill
from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parents[2]
ROOT = Path(tempfile.mkdtemp(prefix="hybridlab-lab-"))  # the lab's root: executed notebooks, the sweep run
OUT = Path(sys.argv[1])
OUT.mkdir(parents=True, exist_ok=True)
papermill.execute_notebook(str(REPO / "notebooks/explore.ipynb"), str(ROOT / "explore.ipynb"), prepare_only=True,
                           parameters={"box_query": "which GPU does loomtrain train on now"}, kernel_name="hybridlab")
papermill.execute_notebook(str(REPO / "notebooks/sweep.ipynb"), str(ROOT / "sweep.ipynb"), prepare_only=True,
                           parameters={"trials": 60, "fold_trials": 10, "run_dir": str(ROOT / "sweep-run")}, kernel_name="hybridlab")
report = REPO / "reports/2026-11-29-report-2"
shutil.copytree(report, ROOT / "report")
TOKEN = "t"; PORT = 8897
lab = subprocess.Popen([str(REPO / ".venv/bin/jupyter"), "lab", "--no-browser", f"--port={PORT}", "--ip=127.0.0.1",
                        f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={ROOT}", "--allow-root",
                        "--MappingKernelManager.default_kernel_name=hybridlab"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
url = f"http://127.0.0.1:{PORT}"
for _ in range(120):
    try:
        urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2); break
    except OSError:
        time.sleep(0.5)

def dismiss(page):
    no = page.get_by_role("button", name="No", exact=True)
    if no.count():
        no.first.click()

def run_all(page):
    page.click("text=Run", timeout=10_000)
    page.click("text=Run All Cells", timeout=10_000)

try:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        # a sweep running, with its trial bar
        page.goto(f"{url}/lab/tree/sweep.ipynb?reset&token={TOKEN}")
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
        page.wait_for_timeout(3000); dismiss(page)
        run_all(page)
        bar = page.locator(".jp-NotebookPanel .jp-OutputArea-output", has_text="trials:").first
        bar.wait_for(state="attached", timeout=180_000)
        page.wait_for_function("() => [...document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output')]"
                               ".some(e => /trials:.*\\d\\d\\/60.*best/s.test(e.innerText))", timeout=300_000)
        bar.scroll_into_view_if_needed()
        page.mouse.wheel(0, -250)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(OUT / "sweep-running.png"))
        # wait for the sweep to finish (the last cell's figures)
        page.wait_for_function("() => document.querySelectorAll('.jp-NotebookPanel img').length >= 3", timeout=420_000)
        page.wait_for_timeout(2000)
        page.screenshot(path=str(OUT / "sweep-done.png"))
        # explore, run live (the query box searches the box_query)
        page.set_viewport_size({"width": 1400, "height": 3200})
        page.goto(f"{url}/lab/tree/explore.ipynb?token={TOKEN}")
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
        page.wait_for_timeout(3000); dismiss(page)
        run_all(page)
        page.wait_for_selector(".jp-NotebookPanel .widget-text input", timeout=120_000)
        page.wait_for_timeout(4000)
        page.screenshot(path=str(OUT / "explore.png"))
        page.locator(".jp-NotebookPanel .widget-text input").first.scroll_into_view_if_needed()
        page.wait_for_timeout(1000)
        page.set_viewport_size({"width": 1400, "height": 1100})
        page.locator(".jp-NotebookPanel .widget-text input").first.scroll_into_view_if_needed()
        page.wait_for_timeout(1000)
        page.screenshot(path=str(OUT / "explore-query-box.png"))
        # the report in JupyterLab, and the static report top to bottom
        page.goto(f"{url}/lab/tree/report/report.ipynb?token={TOKEN}")
        page.wait_for_selector(".jp-NotebookPanel .jp-OutputArea-output", state="attached", timeout=60_000)
        page.wait_for_timeout(3000); dismiss(page)
        page.screenshot(path=str(OUT / "report-lab.png"))
        page.goto((ROOT / "report" / "report.html").as_uri())
        page.wait_for_timeout(1500)
        page.screenshot(path=str(OUT / "report.png"), full_page=True)
        browser.close()
finally:
    lab.terminate(); lab.wait(timeout=30)
