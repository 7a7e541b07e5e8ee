"""Run folders under `reports/` (`reports/<YYYY-MM-DD>-<name>/`: executed notebooks, figures,
`metrics.json`, `summary.md`), an Optuna study's figures, `reports/index.md` listing them, and the
engine state a sweep records so a report can tell when its figures are stale."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from hybridlab.errors import InvalidValueError
from hybridlab.eval.datasets import REPO_ROOT
from hybridlab.eval.evaluate import METRICS
from hybridlab.extras import require
from hybridlab.tune.record import RECORD_FILE, SweepRecord

SWEEP_PREFIX = "sweep-"
#: `journal:PATH` selects Optuna's JournalStorage over the file PATH
JOURNAL_PREFIX = "journal:"


def storage_for(url: str | None, run_dir: str | os.PathLike | None = None):
    """An Optuna storage for `url`: None = SQLite `study.db` in the run folder; `sqlite:///…` with a
    long lock timeout (several local worker processes share it); `journal:PATH` = Optuna's
    JournalStorage over an append-only file (a file on shared storage, NFS-safe lock); any other
    SQLAlchemy URL (`postgresql://…`, through psycopg 3) as an RDBStorage that checks pooled
    connections before use."""
    require("optuna")
    import optuna

    if url is None:
        if run_dir is None:
            raise InvalidValueError("give a storage URL or a run folder")
        url = f"sqlite:///{Path(run_dir).resolve() / 'study.db'}"
    if url.startswith(JOURNAL_PREFIX):
        from optuna.storages.journal import JournalFileBackend

        path = Path(url.removeprefix(JOURNAL_PREFIX)).expanduser()
        if not path.name:
            raise InvalidValueError(f"journal storage needs a file: journal:PATH, got {url!r}")
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


#: "The engine" whose changes make a sweep stale: what builds the index and ranks (ingest, index,
#: search, encoders, the config defaults) and what scores (eval/evaluate.py). Its state is the sha256
#: of these files' contents (*.py, by path), so it holds outside git and for uncommitted changes; the
#: newest git commit touching them is recorded too, for people.
ENGINE_PATHS = (
    "hybridlab/config.py",
    "hybridlab/encoders",
    "hybridlab/eval/evaluate.py",
    "hybridlab/index",
    "hybridlab/ingest",
    "hybridlab/search",
)


def git(*args: str, repo: Path = REPO_ROOT) -> str | None:
    """The stdout of `git -C repo args...`, or None outside git (or when git fails)."""
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def engine_state(root: Path = REPO_ROOT) -> dict[str, Any]:
    """`{"source_sha256", "commit", "date", "dirty", "paths"}`: the hash of the engine's sources
    (:data:`ENGINE_PATHS`, *.py sorted by path) and the newest commit touching them (commit/date None
    outside git; dirty = uncommitted changes there)."""
    files: list[Path] = []
    for path in (root / name for name in ENGINE_PATHS):
        files += path.rglob("*.py") if path.is_dir() else [path] if path.is_file() else []
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda f: f.relative_to(root).as_posix()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    state: dict[str, Any] = {
        "source_sha256": digest.hexdigest(),
        "commit": None,
        "date": None,
        "dirty": None,
        "paths": list(ENGINE_PATHS),
    }
    log = (git("log", "-1", "--format=%H %cI", "--", *ENGINE_PATHS, repo=root) or "").split()
    status = git("status", "--porcelain", "--untracked-files=no", "--", *ENGINE_PATHS, repo=root)
    if len(log) == 2 and status is not None:
        state.update(commit=log[0], date=log[1], dirty=bool(status.strip()))
    return state


def stale_reason(record: SweepRecord, current: Mapping[str, Any] | None = None) -> str | None:
    """Why a sweep record's figures may not hold for today's engine (None when its engine sources
    are today's): the engine changed since, or the record predates engine records."""
    current = current or engine_state()
    recorded = record.engine
    last = (
        f"the engine last changed in {current['commit'][:10]} ({current['date']})"
        if current.get("commit")
        else "the engine's sources differ"
    )
    if not recorded:
        return f"the sweep predates engine records (hybridlab.tune.runs.ENGINE_PATHS); {last}"
    if recorded.get("source_sha256") == current["source_sha256"]:
        return None
    swept = (
        f"swept on {recorded['commit'][:10]}{' + uncommitted changes' if recorded.get('dirty') else ''}"
        if recorded.get("commit")
        else "swept on another engine"
    )
    now = (
        f"now {current['commit'][:10]} ({current['date']}){' + uncommitted changes' if current.get('dirty') else ''}"
        if current.get("commit")
        else "now other sources"
    )
    return f"the engine changed since the sweep ({swept}; {now})"


def new_run_dir(reports: str | os.PathLike, name: str, date: str | None = None) -> Path:
    """A fresh `reports/<date>-<name>[-N]/` (never reuses an existing folder; date: today, UTC)."""
    base = Path(reports) / f"{date or dt.datetime.now(dt.UTC).strftime('%Y-%m-%d')}-{name}"
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


def latest_sweeps(reports: str | os.PathLike) -> list[Path]:
    """The newest finished sweep run (a folder with a metrics.json) of each dataset."""
    folders = [p.parent for p in Path(reports).glob(f"*-{SWEEP_PREFIX}*/{RECORD_FILE}")]
    latest: dict[str, Path] = {}
    for folder in sorted(folders, key=lambda p: (p.stat().st_mtime, p.name)):  # oldest first
        latest[SweepRecord.read(folder).dataset] = folder
    return [latest[name] for name in sorted(latest)]


def load_study(run_dir: str | os.PathLike):
    """The Optuna study a sweep run recorded (its storage URL, else `study.db` in the folder)."""
    require("optuna")
    import optuna

    run_dir = Path(run_dir)
    record = SweepRecord.read(run_dir)
    return optuna.load_study(study_name=record.study, storage=storage_for(record.storage, run_dir))


def plot_study(study, out_dir: str | os.PathLike, prefix: str = "", top: int = 4) -> list[Path]:
    """The study's figures as PNGs: Optuna's optimisation history, its parameter importances (when
    at least two trials completed with different values), and one small panel per important
    parameter (:func:`plot_params`: the `top` most important, readable at page width) in place of
    Optuna's slice plot over every parameter. Optuna's warnings (few trials per regime, experimental
    APIs) are kept out of the output."""
    import warnings

    require("matplotlib", "optuna")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    out_dir = Path(out_dir)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    plots: dict[str, Callable[[Any], Any]] = {"history": ovm.plot_optimization_history}
    if len(complete) >= 2 and len({t.value for t in complete}) > 1:
        plots["importances"] = ovm.plot_param_importances
    written = []
    for name, plot in plots.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            axes = plot(study)
        figure = (axes.flat[0] if hasattr(axes, "flat") else axes).get_figure()
        figure.set_size_inches(8, 4)
        path = out_dir / f"{prefix}{name}.png"
        figure.savefig(path, dpi=90, bbox_inches="tight")
        plt.close(figure)
        written.append(path)
    panels = plot_params(study, out_dir / f"{prefix}params.png", top=top)
    return written + ([panels] if panels else [])


def top_params(study, top: int = 4) -> list[str]:
    """The `top` most important parameters (:func:`importances`); without importances (one completed
    trial, or every trial scoring the same), the parameters whose values varied most across trials."""
    ranked = list(importances(study))
    if not ranked:
        complete = [t for t in study.trials if t.state.name == "COMPLETE"]
        names = {name for t in complete for name in t.params}
        ranked = sorted(names, key=lambda n: (-len({repr(t.params.get(n)) for t in complete}), n))
    return ranked[:top]


def plot_params(study, path: str | os.PathLike, top: int = 4) -> Path | None:
    """One small panel per important parameter (:func:`top_params`): each completed trial's objective
    value against the parameter's value (categories side by side), darker = later trial, the best
    trial as a red star. None when no trial completed."""
    require("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    names = top_params(study, top) if complete else []
    if not names:
        return None
    best = study.best_trial
    figure, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 2.9), sharey=True, squeeze=False)
    for axis, name in zip(axes[0], names):
        trials = [t for t in complete if name in t.params]
        values = [t.params[name] for t in trials]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if numeric:
            xs = [float(v) for v in values]
        else:
            categories = sorted({str(v) for v in values})
            xs = [categories.index(str(v)) for v in values]
            axis.set_xticks(range(len(categories)), categories, rotation=30, ha="right", fontsize=8)
        axis.scatter(
            xs,
            [t.value for t in trials],
            c=[t.number for t in trials],
            cmap="Blues",
            vmin=-len(complete) / 3,
            vmax=max(1, len(complete)),
            s=18,
            edgecolors="none",
        )
        if name in best.params:
            x_best = float(best.params[name]) if numeric else categories.index(str(best.params[name]))
            axis.scatter([x_best], [best.value], marker="*", s=140, color="#dc2626", zorder=3, label="best")
        distribution = study.best_trial.distributions.get(name)
        if numeric and getattr(distribution, "log", False):
            axis.set_xscale("log")
        axis.set_title(name, fontsize=10)
        axis.tick_params(labelsize=8)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("objective", fontsize=9)
    if axes[0][0].get_legend_handles_labels()[0]:  # no "best" marker when no trial finished
        axes[0][0].legend(fontsize=8, loc="lower right")
    figure.suptitle(
        f"The {len(names)} most important parameters: each trial's value (darker = later)", fontsize=10
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return Path(path)


def importances(study) -> dict[str, float]:
    """fANOVA-style parameter importances (Optuna's default evaluator), most important first; empty
    if not computable. Optuna's warnings (e.g. "some regimes have less than 2 trials") are silenced:
    they would open a rendered report."""
    import warnings

    require("optuna")
    import optuna

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {k: float(v) for k, v in optuna.importance.get_param_importances(study).items()}
    except (RuntimeError, ValueError):
        return {}


def params_table(params: Mapping[str, Any], importance: Mapping[str, float] | None = None) -> str:
    """Markdown parameter × value (and its importance, when given; most important first)."""
    importance = importance or {}
    names = sorted(params, key=lambda n: (-importance.get(n, -1.0), n))

    def value(v: Any) -> str:
        number = isinstance(v, int | float) and not isinstance(v, bool)
        return f"{v:.4g}" if number else f"`{v}`"

    if importance:
        lines = ["| parameter | value | importance |", "|---|---:|---:|"]
        lines += [
            f"| {n} | {value(params[n])} | {importance[n]:.3f} |"
            if n in importance
            else f"| {n} | {value(params[n])} | — |"
            for n in names
        ]
    else:
        lines = ["| parameter | value |", "|---|---:|"] + [f"| {n} | {value(params[n])} |" for n in names]
    return "\n".join(lines)


def importances_table(importance: Mapping[str, float], top: int | None = None) -> str:
    """Markdown parameter × importance, most important first (`top` rows at most; the rest summed)."""
    if not importance:
        return "No parameter importances (fewer than two completed trials with different values)."
    ranked = sorted(importance.items(), key=lambda item: -item[1])
    shown, rest = ranked[:top] if top else ranked, ranked[top:] if top else []
    lines = ["| parameter | importance |", "|---|---:|"] + [f"| {n} | {v:.3f} |" for n, v in shown]
    if rest:
        lines.append(f"| {len(rest)} others | {sum(v for _, v in rest):.3f} |")
    return "\n".join(lines)


def space_table(space: Sequence[Any]) -> str:
    """Markdown of a search space (:class:`hybridlab.tune.sweep.Param`s): each parameter's kind, its
    range (log scale, step) or choices, and the condition under which it is sampled."""
    lines = ["| parameter | kind | values | sampled when |", "|---|---|---|---|"]
    for param in space:
        if param.kind == "categorical":
            values = ", ".join(f"`{choice}`" for choice in param.choices)
        else:
            values = (
                f"{param.low:g} – {param.high:g}"
                + (" (log)" if param.log else "")
                + (f", step {param.step:g}" if param.step else "")
            )
        when = (
            f"`{param.when[0]}` in {', '.join(f'`{v}`' for v in param.when[1])}" if param.when else "always"
        )
        lines.append(f"| {param.name} | {param.kind} | {values} | {when} |")
    return "\n".join(lines)


class TrialBar:
    """An Optuna callback drawing a progress bar of completed trials with the best value so far
    (tqdm.auto: an ipywidgets bar in a notebook, text in a terminal). One bar may span several
    studies (the folds of a nested cross-validation): it counts completed trials of every study it
    is given and shows the best value of the study that last completed one. Close it when done
    (`with TrialBar(total) as bar: run_study(..., callbacks=[bar])`)."""

    def __init__(self, total: int, description: str = "trials", disable: bool = False) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc=description, unit="trial", disable=disable)

    def __call__(self, study, trial) -> None:
        if trial.state.name != "COMPLETE":
            return
        self.bar.update(1)
        best = study.best_trial
        self.bar.set_postfix_str(
            f"best {best.value:.4f} (#{best.number}"
            + (f", {study.study_name})" if "-fold" in study.study_name else ")")
        )

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def metrics_table(systems: Mapping[str, Mapping[str, float]], metrics: Sequence[str] = METRICS) -> str:
    """Markdown systems × metrics."""
    lines = ["| system | " + " | ".join(metrics) + " |", "|" + "---|" * (len(metrics) + 1)]
    lines += [
        f"| {name} | " + " | ".join(f"{values[m]:.4f}" for m in metrics) + " |"
        for name, values in systems.items()
    ]
    return "\n".join(lines)


def kinds_table(per_kind: Mapping[str, Mapping[str, Mapping[str, float]]], metric: str) -> str:
    """Markdown kinds × systems of one metric: `{system: {kind: {"n", "mean"}}}` (the first system's
    kinds give the rows and counts)."""
    systems = list(per_kind)
    first = per_kind[systems[0]]
    lines = ["| kind | n | " + " | ".join(systems) + " |", "|---|---:|" + "---:|" * len(systems)]
    for kind, info in first.items():
        cells = [f"{per_kind[s][kind]['mean']:.4f}" if kind in per_kind[s] else "—" for s in systems]
        lines.append(f"| {kind} | {info['n']} | " + " | ".join(cells) + " |")
    lines.append(f"\n{metric} per query kind (`metadata.kind` of the judged queries).")
    return "\n".join(lines)


def cross_validation_table(cv: Mapping[str, Any]) -> str:
    """Markdown of a nested cross-validation: per fold the chosen trial, its value on the folds it
    was tuned on, and the held-out fold's mean for the tuned config and the defaults; then the
    out-of-fold mean with its interval."""
    metric = cv["metric"]
    lines = [
        "| fold | queries | chosen trial | tuned on the other folds | held-out fold, tuned | held-out fold, defaults |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for i, (fold, config) in enumerate(zip(cv["folds"], cv["configs"])):
        chosen = f"#{config['trial']}" + (" (the defaults)" if config.get("defaults") else "")
        lines.append(
            f"| {i + 1} | {len(fold)} | {chosen} | {config['tuning_value']:.4f} | "
            f"{cv['tuned']['fold_means'][i]:.4f} | {cv['defaults']['fold_means'][i]:.4f} |"
        )
    level = round(100 * cv["tuned"]["confidence"])
    lines += [
        "",
        (
            f"Out of fold, {metric}: tuned {cv['tuned']['mean']:.4f} ({level}% CI {cv['tuned']['low']:.4f}–"
            f"{cv['tuned']['high']:.4f}) vs defaults {cv['defaults']['mean']:.4f} ({cv['defaults']['low']:.4f}–"
            f"{cv['defaults']['high']:.4f}); paired {cv['comparison']['test']} p = "
            f"{cv['comparison']['p_value']:.4g} over {cv['comparison']['n']} queries."
        ),
    ]
    return "\n".join(lines)


def describe_splits(record: SweepRecord) -> str:
    """One sentence: what the sweep tuned on and what it reports on."""
    queries = record.queries or {}
    tuned_on, split = record.tuned_on, record.split
    cv = record.cross_validation
    if cv:
        return (
            f"Nested {cv['k']}-fold cross-validation over all {queries.get(split)} judged queries: each fold "
            f"scored by the config a {cv['trials_per_fold']}-trial study chose on the other folds; the main "
            f"study tuned on all queries (in sample) gives the config that is served only when the "
            f"cross-validation is significant."
        )
    return (
        f"Tuned on the `{tuned_on}` split ({queries.get(tuned_on, queries.get('dev'))} queries), reported on the "
        f"`{split}` split ({queries.get(split, queries.get('test'))} queries)."
    )


def write_summary(run_dir: str | os.PathLike, record: SweepRecord) -> Path:
    """`summary.md` of a sweep run: verdict, splits, the report-split metrics vs the references, the
    nested cross-validation (cross-validated sets), per-kind figures, best settings, engine state."""
    run_dir = Path(run_dir)
    best = record.best
    cv = record.cross_validation
    tuned = "tuned (out of fold)" if cv else "tuned (best trial)"
    systems = {tuned: best.test_metrics, **record.baselines}
    index = best.index
    metric = record.metric
    engine = record.engine or {}
    trials = record.trials or {}
    defaults_dev = (record.defaults or {})["dev_metrics"][metric]
    lines = [
        f"# Sweep {record.dataset} — {run_dir.name}",
        "",
        f"**Verdict:** {record.verdict}.",
        "",
        describe_splits(record),
        (
            f"{trials['complete']} trials completed, {trials['pruned']} pruned (index-config cap, "
            f"repeated parameters); best trial #{best.trial} ({'all queries, in sample' if cv else record.tuned_on} "
            f"{metric} {best.dev_value:.4f}; defaults there {defaults_dev:.4f})."
        ),
    ]
    if record.elapsed_s is not None:
        lines.append(f"Wall time of the sweep notebook: {record.elapsed_s:.0f} s.")
    if (run_dir / "config.json").is_file():
        exported = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))["provenance"]
        lines += [
            "",
            f"**Export gate** ([config.json](config.json), what may be served): {exported['verdict']}.",
        ]
    if engine.get("source_sha256"):
        lines.append(
            f"Engine: sources {engine['source_sha256'][:12]}, last engine commit "
            f"{(engine.get('commit') or '?')[:10]}{' + uncommitted changes' if engine.get('dirty') else ''}."
        )
    lines += ["", f"## {'Out-of-fold' if cv else 'Report-split'} metrics", "", metrics_table(systems)]
    if cv:
        lines += ["", "## Nested cross-validation", "", cross_validation_table(cv)]
    if record.per_kind:
        lines += ["", "## Per query kind", "", kinds_table(record.per_kind, metric)]
    lines += [
        "",
        "## Best settings",
        "",
        "```json",
        json.dumps(
            {
                "params": best.params,
                "bm25": {"k1": index["bm25"]["k1"], "b": index["bm25"]["b"]},
                "chunk": {k: index["chunk"][k] for k in ("chunk_size", "chunk_overlap", "strategy")},
            },
            indent=2,
        ),
        "```",
        "",
        "## Files",
        "",
    ]
    lines += [
        f"- [{p.name}]({p.name})"
        for p in sorted(run_dir.iterdir())
        if p.suffix in {".ipynb", ".html", ".png", ".json"} or p.name == "study.db"
    ]
    path = run_dir / "summary.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def update_index(reports: str | os.PathLike) -> Path:
    """`reports/index.md`: every run folder (newest first) with the first verdict line of its summary."""
    reports = Path(reports)
    rows = []
    for summary in sorted(
        reports.glob("*/summary.md"), key=lambda p: (p.parent.name[:10], p.stat().st_mtime), reverse=True
    ):
        text = summary.read_text(encoding="utf-8").splitlines()
        verdict = next(
            (line.replace("**Verdict:**", "").strip() for line in text if line.startswith("**Verdict")), ""
        )
        title = text[0].lstrip("# ").strip() if text else summary.parent.name
        rows.append(f"| [{summary.parent.name}]({summary.parent.name}/summary.md) | {title} | {verdict} |")
    content = [
        "# Reports",
        "",
        "Generated by `hybridlab sweep` / `hybridlab report` (newest first).",
        "",
        "| run | title | verdict |",
        "|---|---|---|",
        *rows,
    ]
    path = reports / "index.md"
    path.write_text("\n".join(content) + "\n", encoding="utf-8")
    return path
