"""Sweeps spread over worker processes and machines: one study on PostgreSQL or a journal file,
created once, the defaults enqueued once, a seed per worker, no repeated parameter sets."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from tiny_evalset import tiny_env, tiny_index  # noqa: F401  (fixtures)

from hybridlab.config import IndexConfig
from hybridlab.eval.evalsets import EvalSet
from hybridlab.tune.sweep.space import ALPHA, FUSION
from hybridlab.tune.sweep.storage import absolute_storage, public_storage, storage_for
from hybridlab.tune.sweep.study import run_study
from hybridlab.tune.sweep.workers import derive_seed

optuna.logging.set_verbosity(optuna.logging.WARNING)

PG_BIN = Path("/usr/lib/postgresql/15/bin")
TRIALS, WORKERS = 40, 4
BASE = IndexConfig(models=("wordllama",))


class FakeEvaluator:
    """Scores without an index: ndcg@10 = 1 - |alpha - 0.7|; `index` reports a 100-chunk index."""

    evalset = EvalSet("fake", (), Path("."), None)

    class _Index:
        n_chunks = 100

    def index(self, config):
        return self._Index()

    def score(self, search, config, split="dev", metrics=None):
        value = 1.0 - abs(search.get("alpha", 0.5) - 0.7)
        return {"hit_rate@10": 1.0, "mrr": value, "ndcg@10": value, "recall@100": 1.0}


def test_storage_for_reads_journal_files_sqlite_urls_and_the_run_folder(tmp_path):
    journal = storage_for(f"journal:{tmp_path / 'shared' / 'sweep.log'}")
    assert (
        isinstance(journal, optuna.storages.JournalStorage) and (tmp_path / "shared" / "sweep.log").is_file()
    )
    assert isinstance(storage_for(f"sqlite:///{tmp_path / 'a.db'}"), optuna.storages.RDBStorage)
    assert (
        isinstance(storage_for(None, tmp_path), optuna.storages.RDBStorage)
        and (tmp_path / "study.db").is_file()
    )
    with pytest.raises(ValueError, match="journal:PATH"):
        storage_for("journal:")
    with pytest.raises(ValueError, match="run folder"):
        storage_for(None)


def test_storage_paths_become_absolute_and_records_lose_the_password(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_storage("journal:runs/sweep.log") == f"journal:{tmp_path / 'runs' / 'sweep.log'}"
    assert absolute_storage("sqlite:///study.db") == f"sqlite:///{tmp_path / 'study.db'}"
    assert absolute_storage("sqlite:////abs/study.db") == "sqlite:////abs/study.db"
    assert absolute_storage(None) is None
    assert (
        public_storage("postgresql://sweep:s3cret@db.lan:5432/optuna")
        == "postgresql://sweep@db.lan:5432/optuna"
    )
    assert public_storage("postgresql://db.lan/optuna") == "postgresql://db.lan/optuna"


def test_every_worker_gets_a_seed_of_its_own():
    seeds = {derive_seed(0, f"{host}:{pid}") for host in ("a", "b") for pid in (100, 101)}
    assert len(seeds) == 4 and all(0 <= s < 2**32 for s in seeds)
    assert derive_seed(0, "a:100") == derive_seed(0, "a:100") != derive_seed(1, "a:100")


def test_only_the_process_creating_a_study_enqueues_the_defaults(tmp_path):
    storage = f"journal:{tmp_path / 'sweep.log'}"
    for trials in (3, 6):  # the second run joins the study of the first
        study = run_study(
            "fake",
            trials=trials,
            storage=storage,
            study_name="s",
            evaluator=FakeEvaluator(),
            space=(FUSION, ALPHA),
        )
    assert [t.number for t in study.trials if t.user_attrs.get("defaults")] == [0]
    assert sum(t.state.name == "COMPLETE" for t in study.trials) == 6


def test_a_repeated_parameter_set_is_pruned_not_evaluated(tmp_path):
    study = run_study(
        "fake",
        trials=3,
        storage=f"sqlite:///{tmp_path / 's.db'}",
        evaluator=FakeEvaluator(),
        space=(FUSION,),
        enqueue_defaults=False,
    )  # three parameter sets in all
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert sorted(t.params["fusion"] for t in complete) == ["convex", "dbsf", "rrf"]
    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert all(t.user_attrs["pruned"].startswith("same parameters as trial #") for t in pruned)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres() -> Iterator[tuple[int, Path]]:
    """(port, log file) of a throwaway PostgreSQL 15 server on the loopback, run as `postgres`
    from a temporary data folder; stopped and removed afterwards."""
    if not (PG_BIN / "initdb").is_file():
        pytest.fail(
            f"PostgreSQL server binaries not found in {PG_BIN}: install Debian's postgresql (15) "
            "package; these tests start a server of their own"
        )
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="hybridlab-pg-"))
    if as_postgres:
        shutil.chown(root, "postgres", "postgres")
    data, log, port = root / "data", root / "server.log", _free_port()
    ctl = [*as_postgres, str(PG_BIN / "pg_ctl"), "-D", str(data)]
    started = False
    try:
        subprocess.run(
            [
                *as_postgres,
                str(PG_BIN / "initdb"),
                "-D",
                str(data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
        )
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100"
        subprocess.run(
            [*ctl, "-l", str(log), "-o", options, "-w", "-t", "60", "start"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )
        started = True
        yield port, log
    finally:
        if started:
            subprocess.run(
                [*ctl, "-m", "fast", "-w", "stop"],
                check=False,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=120,
            )
        shutil.rmtree(root, ignore_errors=True)


def _new_database(port: int, name: str) -> str:
    import psycopg

    with psycopg.connect(
        host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True
    ) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql://postgres@127.0.0.1:{port}/{name}"


def _check_study(storage: str, name: str = "shared") -> list:
    study = optuna.load_study(study_name=name, storage=storage_for(storage))
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert [t.state.name for t in trials if t.state.name not in {"COMPLETE", "PRUNED"}] == []
    assert len(complete) == TRIALS
    defaults = [t for t in trials if t.user_attrs.get("defaults")]
    assert len(defaults) == 1 and defaults[0].state.name == "COMPLETE"
    assert len({json.dumps(t.params, sort_keys=True) for t in complete}) == TRIALS  # no repeated set
    assert all(0.0 <= t.value <= 1.0 for t in complete)
    return complete


def _is_sweep_worker(cmdline: list[str]) -> bool:
    """Whether a command line is a worker of spawn_workers (`python -m hybridlab.cli.sweep_worker ...`)."""
    return any(cmdline[i : i + 2] == ["-m", "hybridlab.cli.sweep_worker"] for i in range(len(cmdline)))


def _reap(child) -> None:
    """Wait for `child` if it is an exited (zombie) child of this process; others' are theirs to reap."""
    import psutil

    with contextlib.suppress(ChildProcessError, psutil.Error):  # already reaped, or gone
        if child.ppid() == os.getpid():
            os.waitpid(child.pid, os.WNOHANG)


def _no_children_left() -> None:
    """No live sweep worker (spawn_workers' `-m hybridlab.cli.sweep_worker`) is left below this process.
    Exited children not yet waited for (zombies, e.g. left by another test that failed) run nothing:
    ours are reaped, and neither they nor processes that vanish meanwhile fail this test."""
    import psutil

    workers = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                _reap(child)
                continue
            cmdline = child.cmdline()
        except psutil.ZombieProcess:
            _reap(child)
            continue
        except psutil.NoSuchProcess:
            continue
        if _is_sweep_worker(cmdline):
            workers.append(f"pid {child.pid}: {' '.join(cmdline)[:300]}")
    assert workers == [], f"sweep workers still running: {workers}"


CREATOR = """
import sys, time
from pathlib import Path
import optuna
from hybridlab.tune.sweep.study import _create_study
flags = Path(sys.argv[2])
(flags / f"ready-{sys.argv[3]}").touch()
while not (flags / "go").exists():
    time.sleep(0.005)
study, created = _create_study(optuna, "s", sys.argv[1], None, seed=0, join_seed=1)
print("created" if created else "joined")
"""


def _start_together(script: str, args: list[str], count: int, flags: Path) -> list[tuple[int, str, str]]:
    """Run `count` copies of `script`, released together once all have imported what they need."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, *args, str(flags), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    deadline = time.monotonic() + 300
    while not all((flags / f"ready-{i}").exists() for i in range(count)):
        if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    (flags / "go").touch()
    try:
        outputs = [p.communicate(timeout=900) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(p.returncode, out, err) for p, (out, err) in zip(processes, outputs)]


@pytest.mark.slow
def test_processes_starting_together_create_the_schema_and_the_study_once(postgres, tmp_path):
    """Four processes on an empty database at once: plain RDBStorage loses 3 of 4 to the schema race
    (UniqueViolation on `studydirection`); _create_study retries, one creates, three join."""
    port, _ = postgres
    results = _start_together(CREATOR, [_new_database(port, "sweep_race")], 4, tmp_path)
    assert all(code == 0 for code, _, _ in results), [err[-1500:] for _, _, err in results]
    assert sorted(out.strip() for _, out, _ in results) == ["created", "joined", "joined", "joined"]


PARENT = """
import sys, time
from pathlib import Path
from hybridlab.config import IndexConfig
from hybridlab.tune.sweep.study import run_study
folder, storage, flags, i = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
(flags / f"machine-{i}").mkdir()
(flags / f"ready-{i}").touch()
while not (flags / "go").exists():
    time.sleep(0.005)
run_study(folder, trials=40, storage=storage, study_name="shared", run_dir=flags / f"machine-{i}", workers=2,
          base_index=IndexConfig(models=("wordllama",)))
"""


@pytest.mark.slow
def test_two_machines_of_two_workers_share_one_postgresql_study(postgres, tiny_env, tmp_path):  # noqa: F811
    """Two `run_study(workers=2)` parents released together on an empty database, as two machines
    running the same command: the schema and the study are created once, the defaults enqueued once,
    and the four workers fill exactly 40 trials without repeating a parameter set."""
    port, log = postgres
    storage = _new_database(port, "sweep_pg")
    for code, out, err in _start_together(PARENT, [str(tiny_env), storage], 2, tmp_path):
        assert code == 0, f"{out[-2000:]}\n{err[-3000:]}\n{log.read_text()[-2000:]}"
    complete = _check_study(storage)
    workers = {t.user_attrs["worker"] for t in complete}
    assert 2 <= len(workers) <= WORKERS and len({t.user_attrs["seed"] for t in complete}) == len(workers)
    assert len(list(tmp_path.glob("machine-*/worker-*.log"))) == WORKERS
    _no_children_left()


@pytest.mark.slow
def test_four_workers_share_one_journal_file(tiny_env, tmp_path, capsys):  # noqa: F811
    storage = f"journal:{tmp_path / 'shared' / 'sweep.log'}"
    study = run_study(
        tiny_env,
        trials=TRIALS,
        storage=storage,
        study_name="shared",
        run_dir=tmp_path,
        workers=WORKERS,
        base_index=BASE,
    )
    complete = _check_study(storage)
    assert sum(t.state.name == "COMPLETE" for t in study.trials) == TRIALS  # the parent's view
    assert sorted(p.name for p in tmp_path.glob("worker-*.log")) == [
        f"worker-{i}.log" for i in range(WORKERS)
    ]
    assert len({t.user_attrs["worker"] for t in complete}) >= 2
    assert f"{TRIALS}/{TRIALS} complete" in capsys.readouterr().out
    _no_children_left()


@pytest.mark.slow
def test_sweep_command_runs_workers_from_the_notebook(tiny_env, tmp_path, monkeypatch):  # noqa: F811
    from hybridlab.cli import main

    monkeypatch.chdir(tmp_path)  # a relative journal path is taken from here, not from the run folder
    reports = tmp_path / "reports"
    assert (
        main(
            [
                "sweep",
                "--dataset",
                str(tiny_env),
                "--trials",
                "6",
                "--workers",
                "2",
                "--storage",
                "journal:shared/sweep.log",
                "--study",
                "cli",
                "--reports",
                str(reports),
                "--export",
                str(tmp_path / "best.json"),
                "--model",
                "wordllama",
                "--max-index-configs",
                "2",
            ]
        )
        == 0
    )
    [run] = [p for p in reports.iterdir() if p.is_dir()]
    record = json.loads((run / "metrics.json").read_text())
    assert record["storage"] == f"journal:{tmp_path / 'shared' / 'sweep.log'}" and record["workers"] == 2
    assert record["trials"]["complete"] == 6
    assert (run / "worker-0.log").is_file() and (run / "worker-1.log").is_file()
    _no_children_left()
