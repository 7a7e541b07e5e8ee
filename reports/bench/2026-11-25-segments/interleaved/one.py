"""One cell: `SRC=<checkout> python one.py WORK DATASET SEGMENTS` (run by interleave.py)."""
import sys, json, time, os
sys.path.insert(0, os.environ["SRC"])
from hybridlab.search.engine import open_index
import numpy as np
work, dataset, segs = sys.argv[1], sys.argv[2], sys.argv[3]
queries = json.loads(open(os.path.join(work, f"{dataset}-queries.json")).read())
NOW = "2026-12-01T00:00:00Z"
with open_index(os.path.join(work, f"{dataset}-{segs}")) as index:
    for q in queries: index.search(q, limit=10, now=NOW)
    wall, cpu = [], []
    for _ in range(2):
        for q in queries:
            t, c = time.perf_counter(), time.thread_time()
            index.search(q, limit=10, now=NOW)
            wall.append(time.perf_counter() - t); cpu.append(time.thread_time() - c)
print(json.dumps({"wall": wall, "cpu": cpu}))
