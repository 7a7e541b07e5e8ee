"""Errors that say who is at fault (issue 40): a `HybridlabError` raised anywhere in a tool reaches
the client as a tool error carrying its message (the user's to fix); anything else is an internal
error: the client reads that it is a bug, without the exception's text, and the server's log holds
the traceback. Driven by the SDK's client."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest


@pytest.fixture
def index_dir(tmp_path):
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths

    source = tmp_path / "memories.jsonl"
    source.write_text(json.dumps({"id": "m1", "content": "The walrus project deploys on Fridays."}) + "\n")
    index_paths([source], tmp_path / "index", IndexConfig(models=("wordllama",)), progress=False)
    return tmp_path / "index"


def call(index_dir, tool: str, arguments: dict, config: dict | None = None):
    from mcp import Client

    from hybridlab.server.mcp import create_server

    async def session():
        async with Client(create_server(index_dir, config)) as client:
            return await client.call_tool(tool, arguments)

    return asyncio.run(session())


def test_a_hybridlab_error_is_a_tool_error_with_its_message(index_dir, monkeypatch):
    from hybridlab.errors import IndexLockedError
    from hybridlab.server import mcp

    def locked(found, max_chars):
        raise IndexLockedError("another process is writing /some/index; try again")

    monkeypatch.setattr(mcp, "_tagged", locked)
    result = call(index_dir, "list_memories", {})
    assert result.is_error and "another process is writing /some/index; try again" in result.content[0].text
    assert "internal error" not in result.content[0].text


def test_anything_else_is_an_internal_error_logged_with_its_traceback(index_dir, monkeypatch, caplog):
    from hybridlab.server import mcp

    def bug(found, max_chars):
        raise RuntimeError("secret internal state 0x2a")

    monkeypatch.setattr(mcp, "_tagged", bug)
    with caplog.at_level(logging.ERROR, logger="hybridlab.server.mcp"):
        result = call(index_dir, "list_memories", {})
    text = result.content[0].text
    assert result.is_error and "internal error in list_memories (RuntimeError)" in text
    assert "the server's log has the traceback" in text and "secret internal state" not in text
    logged = [r for r in caplog.records if r.name == "hybridlab.server.mcp" and r.levelno == logging.ERROR]
    assert logged and logged[0].exc_info and "secret internal state 0x2a" in str(logged[0].exc_info[1])
    assert "Traceback" in caplog.text and "in bug" in caplog.text


def test_a_users_mistake_stays_a_tool_error(index_dir):
    result = call(index_dir, "store_memory", {"content": "x" * 20_001})
    assert (
        result.is_error
        and "content is 20001 characters long; at most 20000 are allowed" in result.content[0].text
    )


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"content": " "}, "content"),
        ({"content": "x" * 20_001}, "content"),
        ({"content": "x", "tags": ["t" * 101]}, "tags"),
        ({"content": "x", "memory_type": ""}, "memory_type"),
        ({"content": "bad \ud800 text"}, "content"),
    ],
)
def test_a_memory_that_is_not_allowed_raises_an_error_naming_its_field(arguments, field):
    from hybridlab.errors import HybridlabError, InvalidValueError
    from hybridlab.index.write.memory import make_memory

    with pytest.raises(InvalidValueError) as error:
        make_memory(**arguments)
    assert error.value.field == field and field in str(error.value)
    assert isinstance(error.value, HybridlabError) and isinstance(
        error.value, ValueError
    )  # old excepts match


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        (
            "store_memory",
            {"content": "The walrus moved.", "created_at": "last tuesday-ish"},
            "memory: 'created_at' is not ISO-8601: 'last tuesday-ish'",
        ),
        (
            "store_memory",  # an ISO time with no UTC time: datetime's OverflowError, the caller's
            {"content": "The walrus moved.", "created_at": "0001-01-01T00:00:00+14:00"},
            "memory: 'created_at' is out of range in UTC (years 1 to 9999): '0001-01-01T00:00:00+14:00'",
        ),
        ("search", {"query": "walrus", "since": "soon"}, "since: not an ISO-8601 date: 'soon'"),
        (
            "search",
            {"query": "walrus", "until": "0001-01-01T00:00:00+14:00"},
            "until: '0001-01-01T00:00:00+14:00' is out of range in UTC (years 1 to 9999)",
        ),
        (
            "search",  # dateparser reads it; the year after it is past datetime's range
            {"query": "walrus", "time": "in 9999"},
            "time: 'in 9999' reaches beyond the dates that can be represented (years 1 to 9999)",
        ),
        ("get_document", {"doc_id": "m1", "section": 7}, "section 7 does not exist"),
        (
            "update_memory",
            {"memory_id": "mem-nowhere", "content": "x"},
            "no document 'mem-nowhere' in the index",
        ),
    ],
)
def test_a_users_mistake_is_a_tool_error_with_its_message(index_dir, tool, arguments, message):
    result = call(index_dir, tool, arguments)
    text = result.content[0].text
    assert result.is_error and message in text, text
    assert "internal error" not in text


def test_an_invalid_setting_is_a_tool_error_naming_it(index_dir, monkeypatch):
    monkeypatch.setenv("HYBRIDLAB_RECENCY_WEIGHT", "2")
    result = call(index_dir, "search", {"query": "walrus"}, config={"search": {"alpha": 0.5}})
    assert result.is_error and "recency_weight must be in [0, 1], got 2.0" in result.content[0].text
    monkeypatch.delenv("HYBRIDLAB_RECENCY_WEIGHT")
    result = call(index_dir, "search", {"query": "walrus"}, config={"search": {"fusion": "rank-soup"}})
    assert result.is_error and "unknown fusion 'rank-soup'; choose from" in result.content[0].text
    assert "internal error" not in result.content[0].text


@pytest.mark.parametrize(
    ("tool", "arguments", "target", "error"),
    [  # bare built-in errors raised inside the library: bugs, whatever their type
        (
            "search",
            {"query": "walrus"},
            "hybridlab.search.pipeline.first_stage.combine",
            ValueError("boom 0x2a"),
        ),
        ("get_document", {"doc_id": "m1"}, "hybridlab.search.engine.stored_document", KeyError("boom 0x2a")),
        (
            "store_memory",
            {"content": "A new fact."},
            "hybridlab.memory.service.make_memory",
            ValueError("boom 0x2a"),
        ),
        (
            "store_memory",
            {"content": "A new fact."},
            "hybridlab.memory.service.make_memory",
            FileNotFoundError("boom 0x2a"),
        ),
    ],
)
def test_a_bare_builtin_error_is_an_internal_error_logged_with_its_traceback(
    index_dir, monkeypatch, caplog, tool, arguments, target, error
):
    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(target, broken)
    with caplog.at_level(logging.ERROR, logger="hybridlab.server.mcp"):
        result = call(index_dir, tool, arguments)
    text = result.content[0].text
    assert result.is_error and f"internal error in {tool} ({type(error).__name__})" in text, text
    assert "boom" not in text
    logged = [r for r in caplog.records if r.name == "hybridlab.server.mcp" and r.levelno == logging.ERROR]
    assert logged and logged[0].exc_info and logged[0].exc_info[1] is error
    assert "Traceback" in caplog.text and "in broken" in caplog.text and "boom 0x2a" in caplog.text
