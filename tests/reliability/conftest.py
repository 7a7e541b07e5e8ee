"""Fixtures of the reliability tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .helpers import MODEL_ARGS, cli, write_corpus


@pytest.fixture(scope="session", autouse=True)
def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def small_index(tmp_path_factory) -> Path:
    """A 120-document wordllama index (built once; copy it before changing it)."""
    root = tmp_path_factory.mktemp("small")
    write_corpus(root / "corpus", range(120))
    cli("index", str(root / "corpus"), "--index", str(root / "index"), *MODEL_ARGS, "-q")
    return root / "index"


def pytest_collection_modifyitems(config, items) -> None:
    """Soak loops run only when the marker expression names them (`make soak`), not in `make test`."""
    if "soak" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="soak loop: run with `make soak` (pytest -m soak)")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
