"""One worker of a shared Optuna sweep: the process `hybridlab sweep --workers N` starts N of
(``python -m hybridlab.cli.sweep_worker``, the command line :meth:`hybridlab.tune.sweep.workers.StudySettings.worker_argv`
writes), and the command that adds another machine's workers to a study on shared storage
(docs/scale-out.md). It joins the study and works until the study holds its trials
(:func:`hybridlab.tune.sweep.study.run_worker`); SIGTERM ends the running trial as FAIL."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    """The worker's options: the study's settings, as the sweep process passes them."""
    from hybridlab.tune.sweep.objective import DEFAULT_MAX_INDEX_CONFIGS, DEFAULT_METRIC

    parser = argparse.ArgumentParser(
        prog="python -m hybridlab.cli.sweep_worker", description="one worker of a shared Optuna sweep"
    )
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--storage", required=True)
    parser.add_argument("--study", required=True)
    parser.add_argument("--metric", default=DEFAULT_METRIC)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-index-configs", type=int, default=DEFAULT_MAX_INDEX_CONFIGS)
    parser.add_argument("--index", help="the base IndexConfig as JSON")
    parser.add_argument("--space", help="the search space as a JSON list of Param fields")
    parser.add_argument("--parent", type=int, help="stop when this process (the one waiting) is gone")
    parser.add_argument("--split", help="the split trials are scored on (default: the set's tuning split)")
    parser.add_argument(
        "--queries", help="score only these query ids of the split (a JSON list; a fold study)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one worker on the study its command line names; 0 once the study holds its trials."""
    from hybridlab.config import IndexConfig
    from hybridlab.tune.sweep.space import Param
    from hybridlab.tune.sweep.study import run_worker
    from hybridlab.tune.sweep.workers import stop_with_parent

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, interrupt)
    if args.parent is not None:
        stop_with_parent(args.parent)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("hybridlab").setLevel(logging.INFO)
    run_worker(
        args.dataset,
        trials=args.trials,
        storage=args.storage,
        study_name=args.study,
        metric=args.metric,
        seed=args.seed,
        max_index_configs=args.max_index_configs,
        base_index=IndexConfig.from_dict(json.loads(args.index)) if args.index else None,
        space=tuple(Param.from_dict(p) for p in json.loads(args.space)) if args.space else None,
        split=args.split,
        query_ids=json.loads(args.queries) if args.queries else None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
