"""Two SciFact-test runs made by other tools, to score beside hybridlab's (docs/evaluation.md):

- `bm25s.trec`: bm25s on its own (Lucene BM25, k1 1.5, b 0.75, English stemmer and stopwords, title
  and text), the top 100 of each query;
- `ranx-rrf.trec`: `ranx.fuse` (RRF, k 60) of that run and a dense run given as a file (e.g. one
  saved by `hybridlab eval --mode vector --save-run dense.trec`).

    python -m bench.external_runs --dense dense.trec --out runs/
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.common import iter_corpus
from hybridlab.eval.datasets import data_dir, load_dataset
from hybridlab.eval.runs import read_run, write_run


def bm25s_run(folder: Path, queries: dict[str, str], k: int = 100) -> dict[str, dict[str, float]]:
    """bm25s's top `k` per query (score-0 padding dropped); every query present."""
    import bm25s
    import Stemmer

    ids, texts = [], []
    for _, doc in iter_corpus(folder):
        ids.append(str(doc["_id"]))
        texts.append(f"{doc.get('title') or ''} {doc.get('text') or ''}")
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    tokens = bm25s.tokenize(list(queries.values()), stopwords="en", stemmer=stemmer, show_progress=False)
    docs, scores = retriever.retrieve(tokens, k=k, show_progress=False)
    return {
        qid: {ids[d]: float(s) for d, s in zip(docs[i], scores[i]) if s > 0} for i, qid in enumerate(queries)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.external_runs", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--data", default=None, help="the SciFact BEIR folder (default: <data dir>/scifact)")
    parser.add_argument("--dense", required=True, help="a dense run file to fuse with bm25s's run")
    parser.add_argument("--out", default=".", help="folder for bm25s.trec and ranx-rrf.trec")
    args = parser.parse_args(argv)
    from ranx import Run, fuse

    folder = Path(args.data) if args.data else data_dir() / "scifact"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    queries = load_dataset(folder, "test").queries
    lexical = bm25s_run(folder, queries)
    write_run(lexical, out / "bm25s.trec", name="bm25s")
    dense = read_run(args.dense)
    dense = {qid: dense.get(qid, {}) for qid in queries}
    fused = fuse(
        [Run(lexical, name="bm25s"), Run(dense, name="dense")], norm=None, method="rrf", params={"k": 60}
    )
    write_run(fused.to_dict(), out / "ranx-rrf.trec", name="ranx-rrf")
    print(f"wrote {out / 'bm25s.trec'} and {out / 'ranx-rrf.trec'} ({len(queries)} queries)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
