"""Worker processes of one study: the settings every process shares (passed on a worker's command
line), starting, watching and stopping the workers, a worker's own sampler seed, and a worker that
stops when the process that started it is gone."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hybridlab.config import IndexConfig
from hybridlab.tune.sweep.objective import DEFAULT_MAX_INDEX_CONFIGS, DEFAULT_METRIC
from hybridlab.tune.sweep.progress import progress_line
from hybridlab.tune.sweep.space import Param

#: seconds between two progress lines of the process that waits for its workers
PROGRESS_EVERY_S = 30.0


def derive_seed(seed: int, worker: str) -> int:
    """A sampler seed of its own for a worker joining a study: the first 4 bytes of
    sha256(`seed/worker`), so workers on any machine never replay each other's proposals."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{worker}".encode()).digest()[:4], "big")


@dataclass(frozen=True)
class StudySettings:
    """What every process working on one study shares, as :func:`~.study.run_study` was given it; a worker
    process receives it on its command line (:meth:`worker_argv`, read back by
    :mod:`hybridlab.cli.sweep_worker`)."""

    dataset: str | os.PathLike
    trials: int
    study_name: str
    metric: str = DEFAULT_METRIC
    seed: int = 0
    max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS
    base_index: IndexConfig | None = None
    #: the search space given; None: the set's own (:func:`~.space.space_for`), which each worker resolves
    space: Sequence[Param] | None = None
    split: str | None = None
    query_ids: Sequence[str] | None = None

    def worker_argv(self, storage: str) -> list[str]:
        """The command line of one worker process (``python -m hybridlab.cli.sweep_worker``) on the
        study in `storage`, stopping when this process is gone."""
        argv = [
            sys.executable,
            "-m",
            "hybridlab.cli.sweep_worker",
            "--dataset",
            str(self.dataset),
            "--trials",
            str(self.trials),
            "--storage",
            storage,
            "--study",
            self.study_name,
            "--metric",
            self.metric,
            "--seed",
            str(self.seed),
            "--max-index-configs",
            str(self.max_index_configs),
            "--index",
            json.dumps((self.base_index or IndexConfig()).to_dict()),
            "--parent",
            str(os.getpid()),
        ]
        if self.space is not None:
            argv += ["--space", json.dumps([dataclasses.asdict(p) for p in self.space])]
        if self.split is not None:
            argv += ["--split", self.split]
        if self.query_ids is not None:
            argv += ["--queries", json.dumps(sorted(self.query_ids))]
        return argv


class _WorkerProcesses:
    """The worker processes of one study, each writing to its own log; started, watched and stopped
    together (:func:`spawn_workers`)."""

    def __init__(self, argv: Sequence[str], logs: Sequence[Path]) -> None:
        self.argv, self.logs = list(argv), list(logs)
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        """Start one worker per log (those started so far are in `processes` should one fail)."""
        for log in self.logs:
            with open(log, "wb") as out:
                self.processes.append(
                    subprocess.Popen(
                        self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                    )
                )

    def wait(self, study, trials: int) -> None:
        """Wait until every worker has exited, printing the study's progress every PROGRESS_EVERY_S."""
        last = time.monotonic()
        while any(p.poll() is None for p in self.processes):
            time.sleep(0.5)
            if time.monotonic() - last >= PROGRESS_EVERY_S:
                print(progress_line(study, trials), flush=True)
                last = time.monotonic()

    def stop(self) -> None:
        """Terminate the workers still running, and kill those that do not exit within 30 s."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def raise_if_failed(self) -> None:
        """RuntimeError with the end of the first failed worker's log, when any failed."""
        failed = [(i, p.returncode) for i, p in enumerate(self.processes) if p.returncode != 0]
        if failed:
            i, code = failed[0]
            tail = self.logs[i].read_text(errors="replace")[-3000:]
            raise RuntimeError(
                f"{len(failed)} of {len(self.logs)} sweep workers failed; worker {i} exited {code}:\n{tail}"
            )


def spawn_workers(
    count: int,
    study,
    *,
    dataset: str | os.PathLike,
    trials: int,
    storage: str,
    study_name: str,
    metric: str = DEFAULT_METRIC,
    seed: int = 0,
    max_index_configs: int = DEFAULT_MAX_INDEX_CONFIGS,
    base_index: IndexConfig | None = None,
    space: Sequence[Param] | None = None,
    log_dir: str | os.PathLike | None = None,
    split: str | None = None,
    query_ids: Sequence[str] | None = None,
) -> None:
    """Run `count` worker processes (``python -m hybridlab.cli.sweep_worker``) on `study_name` in `storage`
    until the study holds `trials` completed trials (scored on `split`, only its `query_ids` when
    given), printing progress every PROGRESS_EVERY_S; each worker logs to `log_dir/worker-<i>.log`
    (`<study_name>-worker-<i>.log` when several studies share the folder). Raises RuntimeError when a worker failed (after the
    others finished); an interrupt stops them all (their running trials end as FAIL)."""
    settings = StudySettings(
        dataset=dataset,
        trials=trials,
        study_name=study_name,
        metric=metric,
        seed=seed,
        max_index_configs=max_index_configs,
        base_index=base_index,
        space=space,
        split=split,
        query_ids=query_ids,
    )
    run_workers(count, study, settings, storage, log_dir)


def run_workers(
    count: int, study, settings: StudySettings, storage: str, log_dir: str | os.PathLike | None
) -> None:
    """:func:`spawn_workers` of a study's settings: `count` workers on the study in `storage`, logging
    to `log_dir` (a new temporary folder when None)."""
    import tempfile

    argv = settings.worker_argv(storage)
    log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="hybridlab-workers-"))
    prefix = "" if settings.query_ids is None else f"{settings.study_name}-"
    workers = _WorkerProcesses(argv, [log_dir / f"{prefix}worker-{i}.log" for i in range(count)])
    try:
        workers.start()
        print(
            f"{count} workers on study {settings.study_name!r} (logs: {log_dir / f'{prefix}worker-*.log'})",
            flush=True,
        )
        workers.wait(study, settings.trials)
    finally:
        workers.stop()
    print(progress_line(study, settings.trials), flush=True)
    workers.raise_if_failed()


def stop_with_parent(parent: int, every_s: float = 2.0) -> None:
    """Interrupt the main thread (its running trial ends as FAIL) once `parent` is no longer this
    process's parent: a killed sweep leaves no workers behind."""
    import _thread
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        _thread.interrupt_main()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
