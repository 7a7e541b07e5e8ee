"""What a person watching a sweep sees: one line of a study's progress, and a bar of completed
trials with the best value so far."""

from __future__ import annotations

from collections import Counter
from typing import Self


def progress_line(study, trials: int) -> str:
    """`<complete>/<trials> complete, <n> running, <n> pruned, <n> failed; best <value> (#<trial>)`."""
    counts = Counter(t.state.name for t in study.get_trials(deepcopy=False))
    line = (
        f"{counts['COMPLETE']}/{trials} complete, {counts['RUNNING']} running, "
        f"{counts['PRUNED']} pruned, {counts['FAIL']} failed"
    )
    if counts["COMPLETE"]:
        best = study.best_trial
        line += f"; best {best.value:.4f} (#{best.number})"
    return line


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
