import sys, json, time, os
sys.path.insert(0, os.environ["SRC"])
from hybridlab.search.engine import open_index
import numpy as np
dataset, segs = sys.argv[1], sys.argv[2]
queries = json.loads(open(f"/tmp/helperB/{dataset}-queries.json").read())
NOW = "2026-12-01T00:00:00Z"
with open_index(f"/tmp/helperB/{dataset}-{segs}") as index:
    for q in queries: index.search(q, limit=10, now=NOW)
    wall, cpu = [], []
    for _ in range(2):
        for q in queries:
            t, c = time.perf_counter(), time.thread_time()
            index.search(q, limit=10, now=NOW)
            wall.append(time.perf_counter() - t); cpu.append(time.thread_time() - c)
print(json.dumps({"wall": wall, "cpu": cpu}))
