"""The error family (issue 40: errors that say who is at fault): the user's mistakes raise a
`HybridlabError` that keeps its built-in base; a bare `ValueError` or `FileNotFoundError` raised in the
package is a bug (the MCP server reports it as an internal error), so each one left is listed here
with the reason it is not the caller's mistake. A new one fails this test: raise `InvalidValueError`
(or `PathNotFoundError`) if the caller is at fault, else add it to the list below with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hybridlab
from hybridlab import errors
from hybridlab.config import ChunkConfig, SearchConfig
from hybridlab.search.filters import parse_when

PACKAGE = Path(hybridlab.__file__).resolve().parent

# why a bare raise is not the caller's mistake
READING = "reading an index file: the reader reports any error of it as CorruptIndexError"
CAUGHT = "control flow: caught a few lines below"
INVARIANT = "an invariant of hybridlab's own data: a bug if it fires"

#: (module, a fragment of the `raise` statement as `ast.unparse` writes it, why it is not the caller's)
BARE_RAISES: dict[str, list[tuple[str, str, str]]] = {
    "ValueError": [
        ("config.py", "raise ValueError(value)", CAUGHT + ", re-raised as InvalidValueError"),
        ("index/write/commit.py", "a legacy segment cannot be kept", INVARIANT),
        (
            "index/write/commit.py",
            "it does not match its checksum",
            CAUGHT + ": the graph reserve is rebuilt",
        ),
        ("index/format/signatures.py", "does not match its sha256", CAUGHT + ": reported as a damaged file"),
        ("index/format/sparse.py", "postings version", READING),
        ("index/format/sparse.py", "postings arrays do not agree", READING),
        ("index/format/sparse.py", "live BM25 rows for", INVARIANT),
        ("index/format/sparse.py", "texts for {len(chunk_ids)} chunk ids", INVARIANT),
        ("index/format/sparse.py", "only a freshly built one-segment", INVARIANT),
        ("index/format/sparse.py", "does not hold integer chunk ids", READING),
        ("index/format/sparse.py", "postings.rows} BM25 rows for", READING),
        ("index/format/dense.py", "ids must be stored in ascending", READING),
        ("index/format/dense.py", "no segments for model", INVARIANT),
        ("index/format/dense.py", "chunk ids must ascend across segments", INVARIANT),
        ("index/format/graph.py", "does not fit", READING),
        ("index/format/graph.py", "points outside the index", READING),
        (
            "search/pipeline/rerank.py",
            "cross-encoder scores",
            "an invariant of the cross-encoder: one score a passage",
        ),
        ("extras.py", "no extra is known to install", "a developer's call of require() without an extra"),
        (
            "index/format/tokens.py",
            "token matrices",
            "an invariant of the write paths: one token matrix a hash",
        ),
        ("search/late.py", "MaxSim scores", "an invariant of the second stage: one MaxSim score a candidate"),
        (
            "eval/crossval.py",
            "score() must return a value",
            "an invariant of the callbacks hybridlab's tuners pass",
        ),
    ],
    "FileNotFoundError": [
        ("index/reader.py", "raise FileNotFoundError('missing')", CAUGHT + ": reported as a damaged index"),
        (
            "encoders/bge.py",
            "lacks model.onnx or tokenizer.json",
            "a broken installation, not a path the user gave",
        ),
        (
            "encoders/packaged_onnx.py",
            "is missing or not the file hybridlab knows",
            "a broken installation, not a path the user gave",
        ),
    ],
}


def bare_raises(name: str) -> list[tuple[str, str]]:
    """(module, `raise ...` statement) of every `raise name(...)` / `raise name` in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            exc = node.exc if isinstance(node, ast.Raise) else None
            target = exc.func if isinstance(exc, ast.Call) else exc
            if isinstance(target, ast.Name) and target.id == name:
                found.append((module, ast.unparse(node)))
    return found


@pytest.mark.parametrize("name", sorted(BARE_RAISES))
def test_every_bare_raise_left_is_listed_with_its_reason(name):
    allowed = BARE_RAISES[name]
    found = bare_raises(name)
    unlisted = [
        f"{module}: {statement}"
        for module, statement in found
        if not any(module == m and fragment in statement for m, fragment, _ in allowed)
    ]
    assert not unlisted, (
        f"a bare {name} is a bug to the MCP server (an internal error): raise InvalidValueError or "
        f"PathNotFoundError (hybridlab.errors) for the caller's mistakes, or list it in BARE_RAISES "
        f"with the reason it is not one: {unlisted}"
    )
    stale = [
        (m, fragment)
        for m, fragment, _ in allowed
        if not any(module == m and fragment in statement for module, statement in found)
    ]
    assert not stale, f"listed in BARE_RAISES but raised no more (remove them): {stale}"


def test_every_error_is_a_hybridlab_error_keeping_its_builtin_base():
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.HybridlabError), name
    assert issubclass(errors.InvalidValueError, ValueError)
    assert issubclass(errors.PathNotFoundError, FileNotFoundError)
    assert issubclass(errors.DocumentNotFoundError, KeyError)
    error = errors.InvalidValueError("alpha must be in [0, 1], got 2", field="alpha")
    assert (str(error), error.field) == ("alpha must be in [0, 1], got 2", "alpha")
    missing = errors.DocumentNotFoundError("no document 'x' in the index")
    assert missing.args[0] == "no document 'x' in the index"  # what the CLI and the server print


def test_the_errors_module_imports_nothing_of_hybridlab():
    tree = ast.parse(Path(errors.__file__).read_text(encoding="utf-8"))
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert not [name for name in imported if name and name.startswith("hybridlab")]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: SearchConfig(alpha=2.0), "alpha"),
        (lambda: ChunkConfig(chunk_size=10), "chunk_size"),
        (lambda: parse_when("soon", "since"), "since"),
        (lambda: parse_when("0001-01-01T00:00:00+14:00", "until"), "until"),
    ],
)
def test_a_users_value_raises_an_invalid_value_error_naming_its_field(call, field):
    with pytest.raises(errors.InvalidValueError) as error:
        call()
    assert error.value.field == field and field in str(error.value)
