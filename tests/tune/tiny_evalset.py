"""A tiny memories-style evaluation set written into a temporary folder (for sweep/notebook tests).

24 memories over 8 topics (3 each, of different ages), 8 queries, qrels = the topic's memories with
the newest one graded 2. Indexed with the `wordllama` model it builds in about a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TOPICS = {
    "docker": ("container image build", "dockerfile layers cache", "compose services network"),
    "postgres": ("database vacuum autovacuum", "index bloat btree", "replication slot lag"),
    "python": ("virtualenv packaging wheel", "asyncio event loop", "typing protocol generics"),
    "rust": ("borrow checker lifetimes", "cargo workspace crates", "tokio runtime tasks"),
    "editor": ("vim keybindings macros", "vscode extension settings", "tmux panes sessions"),
    "deploy": ("kubernetes rollout deployment", "helm chart values", "canary release traffic"),
    "search": ("bm25 ranking lexical", "embedding vectors dense", "fusion rrf hybrid"),
    "travel": ("flight booking airport", "hotel reservation city", "train tickets station"),
}
QUERIES = {
    "docker": "how do I build the docker container image",
    "postgres": "postgres database autovacuum and bloat",
    "python": "python packaging and asyncio",
    "rust": "rust cargo crates and borrow checker",
    "editor": "which editor keybindings do I use",
    "deploy": "kubernetes deployment with helm",
    "search": "hybrid search fusion of bm25 and vectors",
    "travel": "booking a flight and hotel for the trip",
}
NOW = "2026-11-01T00:00:00Z"


def write_tiny_evalset(folder: Path) -> Path:
    """Write memories.jsonl, queries.jsonl, qrels-test.tsv and eval.json into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    memories, qrels = [], ["query-id\tcorpus-id\tscore"]
    for t, (topic, phrases) in enumerate(TOPICS.items()):
        for age, phrase in enumerate(phrases):
            memory_id = f"m-{topic}-{age}"
            month = 10 - 3 * age
            memories.append(
                {
                    "id": memory_id,
                    "content": f"Notes on {topic}: {phrase}. Worked on the {topic} {phrase} again.",
                    "tags": [topic],
                    "created_at": f"2026-{month:02d}-{1 + t:02d}T12:00:00Z",
                }
            )
            qrels.append(f"q-{topic}\t{memory_id}\t{2 if age == 0 else 1}")
    (folder / "memories.jsonl").write_text("\n".join(json.dumps(m) for m in memories) + "\n")
    (folder / "queries.jsonl").write_text(
        "\n".join(json.dumps({"_id": f"q-{topic}", "text": text}) for topic, text in QUERIES.items()) + "\n"
    )
    (folder / "qrels-test.tsv").write_text("\n".join(qrels) + "\n")
    (folder / "eval.json").write_text(json.dumps({"now": NOW, "corpus": "memories.jsonl"}))
    return folder


MODELS = ("wordllama",)


@pytest.fixture(scope="session")
def tiny_index(tmp_path_factory) -> tuple[Path, Path]:
    """(evaluation-set folder, cache folder) with the set's default index already built there."""
    from hybridlab.config import IndexConfig
    from hybridlab.eval.evalsets import ensure_index
    from hybridlab.eval.evaluator import resolve_evalset

    root = tmp_path_factory.mktemp("tiny")
    folder, cache = write_tiny_evalset(root / "tiny"), root / "cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HYBRIDLAB_CACHE", str(cache))
        ensure_index(resolve_evalset(folder), IndexConfig(models=MODELS), progress=False)
    return folder, cache


@pytest.fixture
def tiny_env(tiny_index, monkeypatch) -> Path:
    """The tiny set's folder, with HYBRIDLAB_CACHE pointing at its cache for this test only."""
    folder, cache = tiny_index
    monkeypatch.setenv("HYBRIDLAB_CACHE", str(cache))
    return folder
