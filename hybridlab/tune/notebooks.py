"""Run the project's notebooks with papermill and keep an HTML copy (nbconvert).

See docs/internals/tune-eval.md#notebooks.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hybridlab.errors import InvalidValueError
from hybridlab.eval.datasets import REPO_ROOT
from hybridlab.extras import require
from hybridlab.tune.runs import SUMMARY_FILE, latest_report, latest_sweep_per_set, summarised_runs

logger = logging.getLogger(__name__)

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
NOTEBOOKS = ("start", "explore", "sweep", "staged", "report")
PROJECT_KERNEL = "hybridlab"


def notebook_path(name: str) -> Path:
    """`notebooks/<name>.ipynb` of a known notebook."""
    if name not in NOTEBOOKS:
        raise InvalidValueError(f"unknown notebook {name!r}; choose from {sorted(NOTEBOOKS)}")
    return NOTEBOOKS_DIR / f"{name}.ipynb"


#: the landing notebook's table: each notebook, what it is for, and what a run of it costs here
GUIDE = (
    (
        "explore",
        (
            "read what a search returns: hits as text with the query's terms marked, relevance, the score "
            "breakdown; a query box for your own queries, on an evaluation set or your own index"
        ),
        "seconds",
    ),
    (
        "sweep",
        "tune the search settings with Optuna on an evaluation set; a bar per trial with the best value so far",
        "1.5–3.5 min",
    ),
    (
        "staged",
        (
            "staged search (BM25 narrows, vectors re-score) against parallel hybrid: time and quality per "
            "candidate count"
        ),
        "~1 min on SciFact",
    ),
    (
        "report",
        (
            "the latest sweep of each set: verdicts, tuned vs defaults vs BM25 vs dense with intervals, "
            "wins and losses, per query kind"
        ),
        "~2 min",
    ),
)


def landing_markdown(
    reports: str | os.PathLike = REPO_ROOT / "reports", here: str | os.PathLike = NOTEBOOKS_DIR
) -> str:
    """The landing notebook's body: a table linking each notebook (:data:`GUIDE`), then the newest
    report run and the newest sweep of each set in `reports/`, linked relative to `here` (the
    folder the landing notebook is in), with their executed notebooks and summaries."""

    def link(path: Path) -> str:
        return os.path.relpath(path, here).replace(os.sep, "/")

    lines = ["| notebook | what for | a run here |", "|---|---|---|"]
    lines += [
        f"| [{name}]({link(NOTEBOOKS_DIR / f'{name}.ipynb')}) | {what} | {cost} |"
        for name, what, cost in GUIDE
    ]
    reports = Path(reports)
    runs = summarised_runs(reports)
    report, latest = latest_report(runs), latest_sweep_per_set(runs)

    def files(run: Path, notebook: str) -> str:
        executed = [
            f"[{name}]({link(run / name)})"
            for name in (f"{notebook}.ipynb", f"{notebook}.html")
            if (run / name).is_file()
        ]
        return ", ".join([f"[summary]({link(run / SUMMARY_FILE)})", *executed])

    lines += [
        "",
        "**The latest report:** "
        + (f"`{report.name}` — {files(report, 'report')}" if report else "none yet (`hybridlab report`)"),
    ]
    if latest:
        lines += [
            "",
            "**The latest sweep of each set:** "
            + "; ".join(
                f"{kind} `{run.name}` ({files(run, 'sweep')})" for kind, run in sorted(latest.items())
            ),
        ]
    lines += ["", f"Every run: [reports/index.md]({link(reports / 'index.md')})."]
    return "\n".join(lines)


def kernel_name() -> str:
    """The project kernel when it is registered in this interpreter's prefix, else `python3`
    (ipykernel's built-in spec, which runs `sys.executable`, i.e. the venv)."""
    spec = Path(sys.prefix) / "share" / "jupyter" / "kernels" / PROJECT_KERNEL / "kernel.json"
    return PROJECT_KERNEL if spec.is_file() else "python3"


def quiet_libraries() -> None:
    """Keep the libraries' own noise out of a notebook's rendered output (the setup cell of each
    notebook calls it): ranx's Numba type-safety casts and Optuna's experimental-API notices say
    nothing about the figures, and a library that calls `logging.basicConfig(level=INFO)` when
    imported (wordllama does) would print every INFO line of every logger. The root logger gets a
    WARNING-level stderr handler first, which makes such a call a no-op; our own warnings and errors
    still show."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", module=r"ranx(\.|$)")
    warnings.filterwarnings("ignore", message=r".*unsafe cast from", category=Warning)
    warnings.filterwarnings("ignore", category=Warning, module=r"optuna(\.|$)")
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)


def run_notebook(
    name: str,
    out_dir: str | os.PathLike,
    parameters: Mapping[str, Any],
    *,
    html: bool = True,
    timeout: int | None = None,
) -> Path:
    """Execute `notebooks/<name>.ipynb` with `parameters` into `out_dir/<name>.ipynb` (and `.html`).
    A batch run is quiet: every notebook's `progress` parameter (progress bars, on when a person runs
    the notebook) is False unless `parameters` says otherwise. A failing cell raises papermill's
    PapermillExecutionError after the partial notebook is saved."""
    require("papermill")
    import papermill

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"{name}.ipynb"
    try:
        papermill.execute_notebook(
            str(notebook_path(name)),
            str(output),
            parameters={"progress": False, **parameters},
            kernel_name=kernel_name(),
            cwd=str(out_dir),
            progress_bar=False,
            execution_timeout=timeout,
        )
    finally:
        if output.exists():
            relative_paths(output, out_dir)
        if html and output.exists():
            to_html(output, code=name not in READ_WITHOUT_CODE)
    return output


def path_replacements(out_dir: str | os.PathLike) -> list[tuple[str, str]]:
    """(absolute folder, short name) pairs, longest first: the run folder -> `.`, the checkout ->
    `.`, its parent -> `..`, the home folder -> `~`."""
    pairs = {
        str(Path(out_dir).resolve()): ".",
        str(REPO_ROOT): ".",
        str(REPO_ROOT.parent): "..",
        str(Path.home()): "~",
    }
    return sorted(
        ((folder, short) for folder, short in pairs.items() if folder not in {"/", ""}),
        key=lambda pair: len(pair[0]),
        reverse=True,
    )


def shorten_paths(text: str, replacements: list[tuple[str, str]]) -> str:
    """`text` with every absolute folder of `replacements` shortened: `<folder>/x` -> `x` for `.`,
    `../x`, `~/x`; the folder alone -> its short name; a sibling such as `<checkout>x` is left alone."""
    for folder, short in replacements:

        def repl(match: re.Match, short: str = short) -> str:
            if match.group(1) == "/":
                return "" if short == "." else short + "/"
            return short

        text = re.sub(re.escape(folder) + r"(/|(?![\w.-]))", repl, text)
    return text


def _shorten(value, replacements: list[tuple[str, str]]):
    if isinstance(value, str):
        return shorten_paths(value, replacements)
    if isinstance(value, list):
        return [_shorten(item, replacements) for item in value]
    if isinstance(value, dict):  # images stay as they are (base64 never names a path)
        return {
            key: item if key.startswith("image/") else _shorten(item, replacements)
            for key, item in value.items()
        }
    return value


def relative_paths(notebook: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Rewrite an executed notebook in place without absolute machine paths (:func:`path_replacements`)."""
    notebook = Path(notebook)
    text = notebook.read_text(encoding="utf-8")
    shortened = json.dumps(
        _shorten(json.loads(text), path_replacements(out_dir)), indent=1, ensure_ascii=False
    )
    notebook.write_text(shortened + ("\n" if text.endswith("\n") else ""), encoding="utf-8")
    return notebook


#: what an exported page would fetch from the network, removed: scripts loaded from a URL (require.js,
#: MathJax) and inline scripts that import a module from one (Mermaid, which the pages never draw)
#: notebooks whose HTML copy leaves the code out: what they show is the document
READ_WITHOUT_CODE = ("report",)
EXTERNAL_SCRIPT = re.compile(
    r'<script[^>]*\bsrc="(?:https?:)?//[^"]*"[^>]*>\s*</script>'
    r'|<script[^>]*>(?:(?!</script>).)*?\bimport\(\s*"https?://(?:(?!</script>).)*</script>',
    re.IGNORECASE | re.DOTALL,
)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = "(an interactive widget: open the notebook in JupyterLab to use it)"


def static_copy(book):
    """A copy of a notebook node for a static page: widget views become a one-line note and the
    saved widget state goes (rendering them would load the widget manager from a CDN)."""
    import copy

    book = copy.deepcopy(book)
    book.metadata.pop("widgets", None)
    for cell in book.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data:
                del data[WIDGET_VIEW]
                data["text/plain"] = WIDGET_NOTE
    return book


def to_html(notebook: str | os.PathLike, code: bool = True) -> Path:
    """A self-contained HTML copy next to the executed notebook: images inline, no widget views, and
    no script fetched from the network (the page has no math and no widgets to render); `code`
    False leaves the code cells out (a report reads as a document; the notebook keeps them)."""
    require("nbconvert")
    import nbformat
    from nbconvert import HTMLExporter

    notebook = Path(notebook)
    quiet = logging.getLogger(f"{__name__}.nbconvert")  # it warns of images without alt text, which the
    quiet.setLevel(logging.ERROR)  # lab template has no place for (it fills in a default); errors still show
    body, _ = HTMLExporter(
        log=quiet, exclude_input=not code, exclude_input_prompt=not code, exclude_output_prompt=not code
    ).from_notebook_node(static_copy(nbformat.read(notebook, as_version=4)))
    target = notebook.with_suffix(".html")
    target.write_text(EXTERNAL_SCRIPT.sub("", body), encoding="utf-8")
    return target
