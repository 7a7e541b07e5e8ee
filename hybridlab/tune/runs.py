"""Run folders under `reports/` (`reports/<YYYY-MM-DD>-<name>/`: executed notebooks, figures,
`metrics.json`, `summary.md`), an Optuna study's figures, and `reports/index.md` listing them."""
from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybridlab.eval.evaluate import METRICS

SWEEP_PREFIX = "sweep-"
#: `journal:PATH` selects Optuna's JournalStorage over the file PATH
JOURNAL_PREFIX = "journal:"


def storage_for(url: str | None, run_dir: str | os.PathLike | None = None):
    """An Optuna storage for `url`: None = SQLite `study.db` in the run folder; `sqlite:///…` with a
    long lock timeout (several local worker processes share it); `journal:PATH` = Optuna's
    JournalStorage over an append-only file (a file on shared storage, NFS-safe lock); any other
    SQLAlchemy URL (`postgresql://…`, through psycopg 3) as an RDBStorage that checks pooled
    connections before use."""
    import optuna

    if url is None:
        if run_dir is None:
            raise ValueError("give a storage URL or a run folder")
        url = f"sqlite:///{Path(run_dir).resolve() / 'study.db'}"
    if url.startswith(JOURNAL_PREFIX):
        from optuna.storages.journal import JournalFileBackend

        path = Path(url.removeprefix(JOURNAL_PREFIX)).expanduser()
        if not path.name:
            raise ValueError(f"journal storage needs a file: journal:PATH, got {url!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    if url.startswith("sqlite:"):
        return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
    if url.startswith("postgresql://"):  # psycopg 3 (the `postgres` extra), whatever SQLAlchemy's default
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    except ImportError as error:  # the database driver is missing
        driver = getattr(error.__cause__, "name", None) or "its database driver"
        extra = " (pip install 'hybridlab[postgres]')" if url.startswith("postgres") else ""
        raise ImportError(f"storage {url.split('://')[0]}:// needs {driver}{extra}") from error


def today() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")


def new_run_dir(reports: str | os.PathLike, name: str, date: str | None = None) -> Path:
    """A fresh `reports/<date>-<name>[-N]/` (never reuses an existing folder)."""
    base = Path(reports) / f"{date or today()}-{name}"
    folder, n = base, 1
    while folder.exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    folder.mkdir(parents=True)
    return folder


def scratch_dir(run_dir: str | os.PathLike | None) -> Path:
    """The notebook's output folder: `run_dir` (created), or a fresh temporary one when a notebook is
    opened interactively without a run folder."""
    if run_dir is None:
        import tempfile

        return Path(tempfile.mkdtemp(prefix="hybridlab-"))
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def sweep_runs(reports: str | os.PathLike) -> list[Path]:
    """Finished sweep run folders (those with a metrics.json), oldest first."""
    folders = [p.parent for p in Path(reports).glob(f"*-{SWEEP_PREFIX}*/metrics.json")]
    return sorted(folders, key=lambda p: (p.stat().st_mtime, p.name))


def latest_sweeps(reports: str | os.PathLike) -> list[Path]:
    """The newest finished sweep run of each dataset."""
    latest: dict[str, Path] = {}
    for folder in sweep_runs(reports):
        latest[json.loads((folder / "metrics.json").read_text())["dataset"]] = folder
    return [latest[name] for name in sorted(latest)]


def load_study(run_dir: str | os.PathLike):
    """The Optuna study a sweep run recorded (its storage URL, else `study.db` in the folder)."""
    import optuna

    run_dir = Path(run_dir)
    record = json.loads((run_dir / "metrics.json").read_text())
    return optuna.load_study(study_name=record["study"], storage=storage_for(record.get("storage"), run_dir))


def plot_study(study, out_dir: str | os.PathLike, prefix: str = "") -> list[Path]:
    """Optuna's own matplotlib figures as PNGs: optimisation history, parameter importances (when
    at least two trials completed) and slice plots."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    out_dir = Path(out_dir)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    plots = {"history": ovm.plot_optimization_history, "slice": ovm.plot_slice}
    if len(complete) >= 2 and len({t.value for t in complete}) > 1:
        plots["importances"] = ovm.plot_param_importances
    written = []
    for name, plot in plots.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            axes = plot(study)
        figure = (axes.flat[0] if hasattr(axes, "flat") else axes).get_figure()
        figure.set_size_inches(max(8, figure.get_size_inches()[0]), max(4, figure.get_size_inches()[1]))
        path = out_dir / f"{prefix}{name}.png"
        figure.savefig(path, dpi=90, bbox_inches="tight")
        plt.close(figure)
        written.append(path)
    return written


def importances(study) -> dict[str, float]:
    """fANOVA-style parameter importances (Optuna's default evaluator); empty if not computable."""
    import optuna

    try:
        return {k: float(v) for k, v in optuna.importance.get_param_importances(study).items()}
    except (RuntimeError, ValueError):
        return {}


def metrics_table(systems: Mapping[str, Mapping[str, float]], metrics: Sequence[str] = METRICS) -> str:
    """Markdown systems × metrics."""
    lines = ["| system | " + " | ".join(metrics) + " |", "|" + "---|" * (len(metrics) + 1)]
    lines += [f"| {name} | " + " | ".join(f"{values[m]:.4f}" for m in metrics) + " |" for name, values in systems.items()]
    return "\n".join(lines)


def write_summary(run_dir: str | os.PathLike, record: Mapping[str, Any]) -> Path:
    """`summary.md` of a sweep run: verdict, best settings, test metrics vs the references."""
    run_dir = Path(run_dir)
    best = record["best"]
    systems = {"tuned (best trial)": best["test_metrics"], **record["baselines"]}
    index = best["index"]
    lines = [
        f"# Sweep {record['dataset']} — {run_dir.name}", "",
        f"**Verdict:** {record['verdict']}.", "",
        (f"Tuned on the dev split ({record['queries']['dev']} queries) for {record['metric']}, reported on the "
        f"test split ({record['queries']['test']} queries). {record['trials']['complete']} trials completed, "
        f"{record['trials']['pruned']} pruned (index-config cap); best trial #{best['trial']} "
        f"(dev {record['metric']} {best['dev_value']:.4f}; defaults on dev "
        f"{record['defaults']['dev_metrics'][record['metric']]:.4f})."),
    ]
    if record.get("elapsed_s") is not None:
        lines.append(f"Wall time of the sweep notebook: {record['elapsed_s']:.0f} s.")
    lines += ["", "## Test metrics", "", metrics_table(systems), "",
              "## Best settings", "", "```json",
              json.dumps({"params": best["params"], "bm25": {"k1": index["bm25"]["k1"], "b": index["bm25"]["b"]},
                          "chunk": {k: index["chunk"][k] for k in ("chunk_size", "chunk_overlap", "strategy")}},
                         indent=2), "```", "",
              "## Files", ""]
    lines += [f"- [{p.name}]({p.name})" for p in sorted(run_dir.iterdir())
              if p.suffix in {".ipynb", ".html", ".png", ".json"} or p.name == "study.db"]
    path = run_dir / "summary.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def update_index(reports: str | os.PathLike) -> Path:
    """`reports/index.md`: every run folder (newest first) with the first verdict line of its summary."""
    reports = Path(reports)
    rows = []
    for summary in sorted(reports.glob("*/summary.md"), key=lambda p: (p.parent.name[:10], p.stat().st_mtime),
                          reverse=True):
        text = summary.read_text(encoding="utf-8").splitlines()
        verdict = next((line.replace("**Verdict:**", "").strip() for line in text if line.startswith("**Verdict")), "")
        title = text[0].lstrip("# ").strip() if text else summary.parent.name
        rows.append(f"| [{summary.parent.name}]({summary.parent.name}/summary.md) | {title} | {verdict} |")
    content = ["# Reports", "", "Generated by `hybridlab sweep` / `hybridlab report` (newest first).", "",
               "| run | title | verdict |", "|---|---|---|", *rows]
    path = reports / "index.md"
    path.write_text("\n".join(content) + "\n", encoding="utf-8")
    return path
