"""Build the run-4 indexes: `python build.py WORK DATASET` (scifact | synthetic), with the checkout's Python.

Writes WORK/<dataset>-queries.json and WORK/<dataset>-{1,10} (1 and 10 unmerged segments).
"""
import sys, random, json, time
from pathlib import Path
from hybridlab.bench import writes as W
from hybridlab.config import IndexConfig
from hybridlab.index.build import apply_changes

def docs_queries(dataset):
    if dataset == "scifact":
        from hybridlab.eval.datasets import load_queries
        from hybridlab.eval.evalsets import get_evalset
        from hybridlab.ingest.sources import IngestReport, read_source
        evalset = get_evalset("scifact")
        documents = read_source(evalset.sources[0], IngestReport())
        queries = list(load_queries(evalset.judgements, "test").values())
    else:
        rng = random.Random(100000)
        documents = W._memories(0, 100000, rng)
        queries = [" ".join(rng.sample(W.WORDS, rng.randint(2, 5))) for _ in range(W.SYNTHETIC_QUERIES)]
    return documents, queries

if __name__ == "__main__":
    work, dataset = Path(sys.argv[1]), sys.argv[2]
    documents, queries = docs_queries(dataset)
    (work / f"{dataset}-queries.json").write_text(json.dumps(queries))
    for segments in (1, 10):
        index_dir = work / f"{dataset}-{segments}"
        if index_dir.exists():
            continue
        config = IndexConfig(models=("wordllama",))
        step = -(-len(documents) // segments)
        extra = {"merge": False} if segments > 1 else {}
        t = time.time()
        for start in range(0, len(documents), step):
            apply_changes(index_dir, [(documents[0].source, documents[start:start + step], False)], config, progress=False,
                          cache_path=work / "emb.duckdb", **extra)
        print(dataset, segments, time.time() - t, flush=True)
