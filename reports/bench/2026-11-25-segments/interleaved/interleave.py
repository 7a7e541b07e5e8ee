import subprocess, json, sys, numpy as np
out = {}
for rep in range(3):
    for dataset in ("scifact", "synthetic"):
        for side, src in (("before", "/tmp/helperB/before"), ("after", "/tmp/helperB/after")):
            for segs in ("1", "10"):
                p = subprocess.run(["/work/main/.venv/bin/python", "/tmp/helperB/one.py", dataset, segs], capture_output=True, text=True,
                                   env={"SRC": src, "HYBRIDLAB_CACHE": "/tmp/helperB-cache", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, cwd="/tmp")
                r = json.loads(p.stdout.strip().splitlines()[-1])
                key = f"{dataset}|{side}|{segs}"
                for k in ("wall", "cpu"):
                    out.setdefault(key, {}).setdefault(k, []).extend(r[k])
                print(rep, key, "wall P50 %.3f P95 %.3f cpu P50 %.3f P95 %.3f" % tuple(1000 * np.percentile(r[k], q) for k in ("wall", "cpu") for q in (50, 95)), flush=True)
json.dump(out, open("/tmp/helperB/interleave.json", "w"))
for key, r in out.items():
    print(key, "wall P50 %.3f P95 %.3f cpu P50 %.3f P95 %.3f" % tuple(1000 * np.percentile(r[k], q) for k in ("wall", "cpu") for q in (50, 95)))
