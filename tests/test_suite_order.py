"""The parallel run's plan (tests/conftest.py) names modules that exist: a renamed or removed one
would silently drop out of the long-first order or the evaluation-sets group."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import EVALSET_MODULES, LONG_FIRST

REPO = Path(__file__).resolve().parent.parent


def test_the_long_first_and_evalset_modules_exist():
    missing = [module for module in (*LONG_FIRST, *EVALSET_MODULES) if not (REPO / module).is_file()]
    assert not missing, f"tests/conftest.py names modules that do not exist: {missing}"
    assert set(EVALSET_MODULES) <= set(LONG_FIRST)  # the group that builds indexes starts first
