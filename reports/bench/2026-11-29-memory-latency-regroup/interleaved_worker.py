import json, statistics, sys, time, cProfile, pstats, io
from pathlib import Path
args = json.loads(sys.argv[1])
try:
    from hybridlab.index.write.build import index_paths
except ImportError:
    from hybridlab.index.build import index_paths
from hybridlab.search.engine import Index
if not Path(args["index"], "manifest.json").exists():
    index_paths([args["memories"]], args["index"], progress=False, cache_path=args["cache"])
queries = json.loads(Path(args["queries"]).read_text())
times = []
with Index(args["index"]) as index:
    index.search(queries[0], limit=10, now=args["now"])
    if args.get("warm"):  # every query's vector cached first: the engine without the encoder
        for q in queries: index.search(q, limit=10, now=args["now"])
    for rep in range(args.get("reps", 1)):
        for q in queries:
            t = time.perf_counter(); index.search(q, limit=10, now=args["now"]); times.append((time.perf_counter() - t) * 1000)
    if args.get("profile"):
        p = cProfile.Profile(); p.enable()
        for q in queries: index.search(q, limit=10, now=args["now"])
        p.disable(); s = io.StringIO(); st = pstats.Stats(p, stream=s); st.sort_stats("cumulative").print_stats(45)
        Path(args["profile"]).write_text(f"calls {st.total_calls}\n" + s.getvalue())
print(json.dumps({"p50": statistics.median(times), "n": len(times)}))
