"""The executed notebooks as a person sees them: JupyterLab in headless Chromium (Playwright, the
`dev` extra; Chromium from the system, e.g. `apt-get install chromium`) opens the executed explore
notebook and the committed report and finds no error output and no stderr block.

Set HYBRIDLAB_SCREENSHOTS=DIR to keep a screenshot of each page there (reports/screenshots/).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tiny_evalset import tiny_env, tiny_index  # noqa: F401  (fixtures)

from hybridlab.eval.datasets import REPO_ROOT
from hybridlab.tune.notebooks import run_notebook

pytestmark = pytest.mark.slow
TOKEN = "hybridlab-test"
STDERR = '[data-mime-type="application/vnd.jupyter.stderr"]'  # stderr streams and tracebacks alike


def chromium() -> str | None:
    """The system's Chromium (Playwright drives it; no browser download)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server rooted at tmp_path/lab (yields its base URL); stopped afterwards."""
    root = tmp_path / "lab"
    root.mkdir()
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--ServerApp.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--allow-root",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--MappingKernelManager.default_kernel_name=python3",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("JupyterLab did not start") from None
                time.sleep(0.5)
        yield root, url
    finally:
        process.terminate()
        process.wait(timeout=30)


def open_notebook(page, url: str, name: str, shots: Path | None) -> dict[str, int]:
    """Open `name` in JupyterLab, wait until its outputs render; counts of outputs and stderr blocks."""
    page.goto(f"{url}/lab/tree/{name}?token={TOKEN}")
    page.wait_for_selector(".jp-NotebookPanel .jp-OutputArea-output", state="attached", timeout=60_000)
    page.wait_for_timeout(1500)  # images and markdown settle
    news = page.get_by_role("button", name="No", exact=True)  # "notified about Jupyter news?"
    if news.count():
        news.first.click()
    counts = {
        "outputs": page.locator(".jp-NotebookPanel .jp-OutputArea-output").count(),
        "stderr": page.locator(f".jp-NotebookPanel {STDERR}").count(),
    }
    if shots is not None:
        page.screenshot(path=str(shots / f"lab-{Path(name).stem}.png"))
    return counts


def test_executed_explore_and_report_open_in_jupyterlab_without_errors_or_stderr(tiny_env, tmp_path, lab):  # noqa: F811
    playwright = pytest.importorskip("playwright.sync_api")
    browser_path = chromium()
    if browser_path is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium)")
    root, url = lab
    run_notebook(
        "explore", root / "explore", {"dataset": str(tiny_env), "models": ["wordllama"], "n_queries": 2}
    )
    newest = lambda path: (path.parent.name[:10], len(path.parent.name), path.parent.name)
    report = max((REPO_ROOT / "reports").glob("*-report*/report.ipynb"), key=newest)
    shutil.copytree(report.parent, root / "report")
    shots = Path(os.environ["HYBRIDLAB_SCREENSHOTS"]) if os.environ.get("HYBRIDLAB_SCREENSHOTS") else None
    if shots is not None:
        shots.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2400})
            explore = open_notebook(page, url, "explore/explore.ipynb", shots)
            assert page.locator(".jp-NotebookPanel mark").count() > 0  # the query's terms marked
            assert explore["outputs"] >= 3 and explore["stderr"] == 0, explore
            shown = open_notebook(page, url, "report/report.ipynb", shots)
            assert shown["outputs"] >= 3 and shown["stderr"] == 0, shown
            if shots is not None:  # the static report, top to bottom
                page.goto((root / "report" / "report.html").as_uri())
                page.screenshot(path=str(shots / "report-html.png"), full_page=True)
        finally:
            browser.close()
