"""Fault injection for the write path: `HOOK` (tests set it) or env `HYBRIDLAB_TRACE_STAGES` is told
each stage a write reaches, so a test can kill the process right after it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

# Test hook for fault injection: called with a stage name at each step of a build.
HOOK: Callable[[str], None] | None = None


def checkpoint(stage: str) -> None:
    """Tell the fault-injection hook (or the trace) that a write reached `stage`."""
    hook = HOOK
    if hook is None and os.environ.get("HYBRIDLAB_TRACE_STAGES"):
        print(f"STAGE {stage}", flush=True)
        # the fault-injection tests SIGKILL the process right after a stage line: a short pause lets
        # the kill land before the next stage's work on a busy machine (HYBRIDLAB_TRACE_PAUSE seconds)
        time.sleep(float(os.environ.get("HYBRIDLAB_TRACE_PAUSE", "0.05")))
    elif hook is not None:
        hook(stage)
