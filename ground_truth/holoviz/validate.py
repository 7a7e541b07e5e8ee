"""Validate the HoloViz retrieval ground truth (queries.jsonl + qrels-test.tsv).

Usage (from anywhere):
    /work/main/.venv/bin/python ground_truth/holoviz/validate.py [CORPUS_DIR]

CORPUS_DIR defaults to ``../shared/corpora/holoviz`` relative to the repository
root (the repository root is two levels above this file).  Exits with status 1
if any check fails.
"""
from __future__ import annotations

import csv
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
ALLOWED_KINDS = {"howto", "api", "cross", "concept"}
ALLOWED_SCORES = {1, 2}
REQUIRED = ("Tabulator frozen_columns embed_content",
            "panel/examples/reference/widgets/Tabulator.ipynb", 2)


def main(argv: list[str]) -> int:
    corpus = Path(argv[1]) if len(argv) > 1 else REPO_ROOT / ".." / "shared" / "corpora" / "holoviz"
    corpus = corpus.resolve()
    errors: list[str] = []
    if not corpus.is_dir():
        print(f"ERROR: corpus dir not found: {corpus}")
        return 1

    # ---- queries
    queries: dict[str, dict] = {}
    with open(HERE / "queries.jsonl", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            q = json.loads(line)
            qid = q.get("_id")
            if not qid or not isinstance(q.get("text"), str) or not q["text"].strip():
                errors.append(f"queries.jsonl:{lineno}: missing _id or text")
                continue
            if qid in queries:
                errors.append(f"queries.jsonl:{lineno}: duplicate _id {qid}")
            kind = (q.get("metadata") or {}).get("kind")
            if kind not in ALLOWED_KINDS:
                errors.append(f"queries.jsonl:{lineno}: bad kind {kind!r} for {qid}")
            queries[qid] = q
    texts = Counter(q["text"].strip().lower() for q in queries.values())
    for t, n in texts.items():
        if n > 1:
            errors.append(f"duplicate query text ({n}x): {t!r}")

    # ---- qrels
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with open(HERE / "qrels-test.tsv", encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        header = next(reader)
        if header != ["query-id", "corpus-id", "score"]:
            errors.append(f"qrels header is {header}, expected query-id/corpus-id/score")
        for lineno, row in enumerate(reader, 2):
            if len(row) != 3:
                errors.append(f"qrels:{lineno}: expected 3 columns, got {row}")
                continue
            qid, doc, score_s = row
            try:
                score = int(score_s)
            except ValueError:
                errors.append(f"qrels:{lineno}: non-integer score {score_s!r}")
                continue
            if score not in ALLOWED_SCORES:
                errors.append(f"qrels:{lineno}: score {score} not in {sorted(ALLOWED_SCORES)}")
            if qid not in queries:
                errors.append(f"qrels:{lineno}: unknown query id {qid}")
            if doc in qrels[qid]:
                errors.append(f"qrels:{lineno}: duplicate judgement {qid} {doc}")
            if "\\" in doc or doc.startswith("/") or not (corpus / doc).is_file():
                errors.append(f"qrels:{lineno}: document not in corpus: {doc}")
            qrels[qid][doc] = score

    for qid in queries:
        rel = qrels.get(qid, {})
        if not rel:
            errors.append(f"query {qid} has no judgements")
        elif 2 not in rel.values():
            errors.append(f"query {qid} has no score-2 (primary) document")

    # required query
    req_text, req_doc, req_score = REQUIRED
    req_ids = [qid for qid, q in queries.items() if q["text"] == req_text]
    if not req_ids:
        errors.append(f"required query missing: {req_text!r}")
    else:
        q = queries[req_ids[0]]
        if q["metadata"]["kind"] != "api":
            errors.append("required query must be kind 'api'")
        if qrels[req_ids[0]].get(req_doc) != req_score:
            errors.append(f"required judgement missing: {req_ids[0]} {req_doc} {req_score}")

    # ---- report
    kinds = Counter(q["metadata"]["kind"] for q in queries.values())
    n_judg = sum(len(v) for v in qrels.values())
    scores = Counter(s for v in qrels.values() for s in v.values())
    docs = {d for v in qrels.values() for d in v}
    projects = Counter(d.split("/", 1)[0] for d in docs)
    print(f"corpus: {corpus}")
    print(f"queries: {len(queries)}")
    for k in sorted(kinds):
        kq = [qid for qid, q in queries.items() if q["metadata"]["kind"] == k]
        avg = sum(len(qrels[qid]) for qid in kq) / len(kq)
        print(f"  {k:8s} {kinds[k]:3d} queries, {avg:.2f} relevant docs/query")
    print(f"judgements: {n_judg} (score 2: {scores[2]}, score 1: {scores[1]})")
    print(f"avg relevant docs per query: {n_judg / max(len(queries), 1):.2f}")
    print(f"min/max relevant docs per query: "
          f"{min(len(v) for v in qrels.values())}/{max(len(v) for v in qrels.values())}")
    print(f"distinct judged documents: {len(docs)}  by project: "
          + ", ".join(f"{p}={n}" for p, n in sorted(projects.items())))
    if errors:
        print(f"\nFAILED: {len(errors)} problem(s)")
        for e in errors:
            print("  -", e)
        return 1
    print("\nOK: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
