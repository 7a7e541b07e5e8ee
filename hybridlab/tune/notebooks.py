"""Run the project's notebooks with papermill and keep an HTML copy (nbconvert).

The notebooks in ``notebooks/`` are views: a cell tagged ``parameters`` holds parameters only,
every computation is a call into the package. The kernel is the project's own (`make setup`
registers ``hybridlab`` into the venv); without it, ``python3`` of the running interpreter.
"""
from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hybridlab.eval.datasets import REPO_ROOT

logger = logging.getLogger(__name__)

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
NOTEBOOKS = ("explore", "sweep", "staged", "report")
PROJECT_KERNEL = "hybridlab"


def notebook_path(name: str) -> Path:
    """`notebooks/<name>.ipynb` of a known notebook."""
    if name not in NOTEBOOKS:
        raise ValueError(f"unknown notebook {name!r}; choose from {sorted(NOTEBOOKS)}")
    return NOTEBOOKS_DIR / f"{name}.ipynb"


def kernel_name() -> str:
    """The project kernel when it is registered in this interpreter's prefix, else `python3`
    (ipykernel's built-in spec, which runs `sys.executable`, i.e. the venv)."""
    spec = Path(sys.prefix) / "share" / "jupyter" / "kernels" / PROJECT_KERNEL / "kernel.json"
    return PROJECT_KERNEL if spec.is_file() else "python3"


def run_notebook(name: str, out_dir: str | os.PathLike, parameters: Mapping[str, Any], *,
                 html: bool = True, timeout: int | None = None) -> Path:
    """Execute `notebooks/<name>.ipynb` with `parameters` into `out_dir/<name>.ipynb` (and `.html`).
    A failing cell raises papermill's PapermillExecutionError after the partial notebook is saved."""
    import papermill

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"{name}.ipynb"
    try:
        papermill.execute_notebook(
            str(notebook_path(name)), str(output), parameters=dict(parameters), kernel_name=kernel_name(),
            cwd=str(out_dir), progress_bar=False, execution_timeout=timeout,
        )
    finally:
        if html and output.exists():
            to_html(output)
    return output


def to_html(notebook: str | os.PathLike) -> Path:
    """An HTML copy next to the executed notebook."""
    import nbformat
    from nbconvert import HTMLExporter

    notebook = Path(notebook)
    body, _ = HTMLExporter().from_notebook_node(nbformat.read(notebook, as_version=4))
    target = notebook.with_suffix(".html")
    target.write_text(body, encoding="utf-8")
    return target
