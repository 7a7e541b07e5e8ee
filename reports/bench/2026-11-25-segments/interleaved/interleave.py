"""Three interleaved rounds of before/after x 1/10 segments: `python interleave.py WORK BEFORE AFTER`
(WORK as given to build.py; BEFORE and AFTER are checkouts of the two commits). Writes WORK/interleave.json.
"""
import subprocess, json, sys, numpy as np
from pathlib import Path
work, before, after = sys.argv[1:4]
one = str(Path(__file__).resolve().parent / "one.py")
out = {}
for rep in range(3):
    for dataset in ("scifact", "synthetic"):
        for side, src in (("before", before), ("after", after)):
            for segs in ("1", "10"):
                p = subprocess.run([sys.executable, one, work, dataset, segs], capture_output=True, text=True,
                                   env={"SRC": src, "HYBRIDLAB_CACHE": str(Path(work) / "cache"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, cwd=work)
                r = json.loads(p.stdout.strip().splitlines()[-1])
                key = f"{dataset}|{side}|{segs}"
                for k in ("wall", "cpu"):
                    out.setdefault(key, {}).setdefault(k, []).extend(r[k])
                print(rep, key, "wall P50 %.3f P95 %.3f cpu P50 %.3f P95 %.3f" % tuple(1000 * np.percentile(r[k], q) for k in ("wall", "cpu") for q in (50, 95)), flush=True)
json.dump(out, open(Path(work) / "interleave.json", "w"))
for key, r in out.items():
    print(key, "wall P50 %.3f P95 %.3f cpu P50 %.3f P95 %.3f" % tuple(1000 * np.percentile(r[k], q) for k in ("wall", "cpu") for q in (50, 95)))
