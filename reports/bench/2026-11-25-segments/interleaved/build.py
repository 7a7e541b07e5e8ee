import sys, random, json, time
from pathlib import Path
sys.path.insert(0, "/work/main")
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
    dataset = sys.argv[1]
    documents, queries = docs_queries(dataset)
    Path(f"/tmp/helperB/{dataset}-queries.json").write_text(json.dumps(queries))
    for segments in (1, 10):
        index_dir = Path(f"/tmp/helperB/{dataset}-{segments}")
        if index_dir.exists():
            continue
        config = IndexConfig(models=("wordllama",))
        step = -(-len(documents) // segments)
        extra = {"merge": False} if segments > 1 else {}
        t = time.time()
        for start in range(0, len(documents), step):
            apply_changes(index_dir, [(documents[0].source, documents[start:start + step], False)], config, progress=False,
                          cache_path=Path("/tmp/helperB/emb.duckdb"), **extra)
        print(dataset, segments, time.time() - t, flush=True)
