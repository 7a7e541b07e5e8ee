"""An Optuna study's figures: its optimisation history, its parameter importances, and one small
panel per important parameter."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybridlab.extras import require


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
