"""Shared fixtures: a tiny corpus of every source kind and one small index built from it.

Fixture files live in `tests/data/` (written by hand for these tests, no dataset text):

    tests/data/corpus/
      docs/panel/tabulator.md     markdown: H1 + H2 sections, SelectEditor, add_filter, page_size,
                                  a code fence with a `#` comment line
      docs/panel/deploy.rst       reST headings, ERR_TLS_CERT_ALTNAME_INVALID
      docs/hvplot/scatter.ipynb   notebook: markdown + code cells; one output holds
                                  `zyzzyvaoutputonly` (outputs must not be indexed)
      docs/faq.txt                plain text without headings
      memories.jsonl              3 memories with tags and created_at (m2 in project "infra")
      beir/corpus.jsonl           a 3-document BEIR corpus (d3 without a title)

Every test that writes uses a tmp copy (`corpus_copy`), never `tests/data/` itself.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

try:  # first imported here, under pytest's own capture: the MCP stdio client binds the sys.stderr of its
    # import as its default errlog, and a test's capsys/capfd stream (no fileno) would break every later
    # stdio test of the session
    import mcp.client.stdio  # noqa: F401
except ImportError:  # the mcp extra is not installed: its tests skip
    pass

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DATA_DIR = Path(__file__).resolve().parent / "data"
CORPUS_DIR = DATA_DIR / "corpus"
# The tiny corpus, in the order the shared index is built from: folder, memories, BEIR.
CORPUS_SOURCES = ("docs", "memories.jsonl", "beir")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """`tests/data/` (read-only: copy before changing anything)."""
    return DATA_DIR


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """A session-wide read-only copy of `tests/data/corpus` (docs/, memories.jsonl, beir/)."""
    root = tmp_path_factory.mktemp("tiny-corpus")
    shutil.copytree(CORPUS_DIR, root, dirs_exist_ok=True)
    return root


@pytest.fixture
def corpus_copy(tmp_path) -> Path:
    """A private copy of the tiny corpus for one test to change (in `tmp_path/corpus`)."""
    root = tmp_path / "corpus"
    shutil.copytree(CORPUS_DIR, root)
    return root


@pytest.fixture(scope="session")
def embedding_cache_path(tmp_path_factory) -> Path:
    """One embeddings cache for the session: indexes built with `cache_path=` this file embed
    each distinct chunk text once per session. Tests that count embeddings use their own."""
    return tmp_path_factory.mktemp("embedding-cache") / "embeddings.duckdb"


@pytest.fixture(scope="session")
def tiny_index(tiny_corpus, embedding_cache_path, tmp_path_factory) -> Path:
    """A small index of the whole tiny corpus with the default config (MiniLM, header chunking).
    Read-only for tests: build your own (e.g. with `corpus_copy`) to change it."""
    from hybridlab.index.write.build import index_paths

    index_dir = tmp_path_factory.mktemp("tiny-index") / "index"
    index_paths(
        [tiny_corpus / name for name in CORPUS_SOURCES],
        index_dir,
        progress=False,
        cache_path=embedding_cache_path,
    )
    return index_dir


@pytest.fixture(scope="session")
def opened_tiny_index(tiny_index):
    """`search.open_index(tiny_index)`, opened once for the session."""
    from hybridlab.search.engine import open_index

    index = open_index(tiny_index)
    yield index
    index.close()


#: the test modules that take longest here, longest first (a fresh clone's `make test`, 2026-11-29):
#: a parallel run (`make test`: pytest-xdist, `--dist loadgroup`) hands them out first, so that none
#: of them is left running alone at the end. Any order is correct; this one is only faster.
LONG_FIRST = (
    "tests/eval/test_quality_gates.py",  # cold: SciFact, HoloViz (twice) and three BEIR indexes
    "tests/eval/test_fuse_runs.py",
    "tests/tune/test_repro.py",
    "tests/reliability/test_kill.py",
    "tests/reliability/test_mcp_load.py",
    "tests/tune/test_sweep_workers.py",
    "tests/tune/test_notebooks.py",
    "tests/search/test_engine_threads.py",
    "tests/index/test_scratch_release.py",
    "tests/index/test_identity.py",
    "tests/reliability/test_processes.py",
    "tests/reliability/test_corruption.py",
    "tests/server/test_mcp_transports.py",
    "tests/tune/test_sweep.py",
    "tests/encoders/test_encoder_settings.py",
)


#: modules that build the evaluation sets' indexes into the shared cache: one group, so that one worker
#: builds them (one build at a time per embeddings cache) while the other runs the rest, not waiting
EVALSET_MODULES = (
    "tests/eval/test_quality_gates.py",
    "tests/eval/test_fuse_runs.py",
    "tests/tune/test_repro.py",
)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist's `--dist loadgroup`, each module is one group (its module fixtures are
    built once, on one worker) unless a test names its own `xdist_group`, and the modules building
    the evaluation sets are one; the long ones first. The marks must be set before xdist's hook
    turns them into node-id suffixes (tryfirst; after it they are ignored and the groups split), and
    pytest stays below 9.2 (pyproject's dev extra): 9.2 derives a node id from `_id`, so the suffix
    xdist 3.8 writes into `_nodeid` is lost and every group splits across the workers."""
    rank = {module: i for i, module in enumerate(LONG_FIRST)}
    for item in items:
        module = item.nodeid.split("::")[0]
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group("evalsets" if module in EVALSET_MODULES else module))
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
