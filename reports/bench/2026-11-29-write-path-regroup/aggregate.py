"""The table of README.md: python aggregate.py <this folder>."""
import json,glob,statistics,sys,re
root=sys.argv[1]
data={}
for f in sorted(glob.glob(f"{root}/run*-*/memory_writes.json") + glob.glob(f"{root}/run*-*.json")):
    m=re.search(r"run(\d+)-(before|after)",f); pair,side=int(m[1]),m[2]
    r=json.load(open(f))
    for way,facts in r["ways"].items():
        for op,s in facts["summary"].items():
            data.setdefault((way,op),{}).setdefault(side,{})[pair]=s["p50_ms"]
print("| operation (P50 ms) | before median | after median | median of per-pair after/before | pairs after slower |")
print("|---|---|---|---|---|")
for (way,op),sides in data.items():
    b,a=sides["before"],sides["after"]
    pairs=sorted(set(b)&set(a))
    ratios=[a[p]/b[p] for p in pairs]
    print(f"| {way}: {op} | {statistics.median(b.values()):.2f} | {statistics.median(a.values()):.2f} | {statistics.median(ratios):.2f} | {sum(r>1 for r in ratios)}/{len(ratios)} |")
