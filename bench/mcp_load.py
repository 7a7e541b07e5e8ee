"""MCP load with a crash: mixed calls from concurrent clients against one `hybridlab mcp` process, a
SIGKILL of that process mid-run, a restart on the same index, then a check of every acknowledged memory.

    python -m bench.mcp_load [--calls 2000] [--clients 4] [--kill-at 0.5] [--runs 3]
                                       [--out reports/bench/<date>-mcp-load]

The scenario (issue 20's target; `tests/reliability/test_mcp_load.py` runs the same one):

1. A small wordllama index of synthetic memories in a temporary folder (the encoder is static, so what
   shows is the server and the write path, not encoding).
2. `hybridlab mcp --transport streamable-http` on a free loopback port, in its own process group;
   `--clients` SDK clients (one session each) share `--calls` mixed calls: `store_memory` (each memory
   carries a unique made-up word, its token), `search` for the token of a memory acknowledged earlier
   (it must be in the results), `search_by_tag` for the client's own tag (its newest acknowledged
   memory must come first) and `get_document` of an acknowledged memory (the text must be exactly the
   content stored), `update_memory` and `delete_memory` of one of the client's own acknowledged memories
   (never one another client is reading at that moment). A deleted memory must never be returned by a
   search, `search_by_tag` or `get_document` that started after its deletion was acknowledged. A failed
   call or a failed check is an error; nothing is retried.
3. After `--kill-at` of the calls, the process group is SIGKILLed while calls are in flight; those
   calls are counted as interrupted, not as errors, and not towards `--calls`. The index is verified
   (`hybridlab.index.admin.verify`), the server restarted on the same index and port, every memory
   acknowledged before the kill checked through it (get_document: the exact content; search: found by
   its token; a deleted one absent), every store that was in flight checked to be either absent or
   complete, every update in flight the old or the new text, every delete in flight gone or whole;
   then the clients reconnect and finish the calls.
4. The server stops (SIGTERM); the index is verified again and every acknowledged memory of the run is
   checked in it, opened in this process.

`--servers N` (N > 1, no kill) runs N server processes on the one index, as N desktop clients each
spawning the server on one memory folder would: client n talks to server n % N, and every check
(a memory found by its token, read back whole) crosses processes.

Figures: calls/s, P50/P95 latency per tool, errors, memories checked, the kill/restart result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybridlab.config import offline_environment

TOOLS = ("store_memory", "search", "search_by_tag", "get_document", "update_memory", "delete_memory")
MIX = {
    "store_memory": 0.15,
    "search": 0.35,
    "search_by_tag": 0.12,
    "get_document": 0.24,
    "update_memory": 0.08,
    "delete_memory": 0.06,
}
TOPICS = ("release", "deploy", "editor", "database", "testing", "travel", "budget", "music")
WORDS = (
    "panel",
    "widget",
    "cluster",
    "runner",
    "cache",
    "queue",
    "schema",
    "backup",
    "plot",
    "layout",
    "kernel",
    "notebook",
    "session",
    "router",
    "metric",
    "invoice",
    "ticket",
    "branch",
    "shell",
    "vault",
)
CALL_TIMEOUT = 60.0
SEARCH_LIMIT = 10


@dataclass(frozen=True)
class LoadConfig:
    """One run: `calls` completed tool calls in all from `clients` concurrent sessions, `mix` = each
    tool's share; the server is SIGKILLed once `kill_at` of them are done (None = no kill), over an
    index of `memories` memories."""

    calls: int = 2000
    clients: int = 4
    kill_at: float | None = 0.5
    memories: int = 200
    seed: int = 0
    mix: tuple[tuple[str, float], ...] = tuple(MIX.items())
    timeout: float = 1800.0  # seconds for the whole load: a hang fails instead of waiting forever
    servers: int = 1  # `hybridlab mcp` processes on the one index; client n talks to server n % servers

    def __post_init__(self) -> None:
        if self.calls < 1 or self.clients < 1:
            raise ValueError(f"calls and clients must be >= 1, got {self.calls} and {self.clients}")
        if self.servers < 1:
            raise ValueError(f"servers must be >= 1, got {self.servers}")
        if self.servers > 1 and self.kill_at is not None:
            raise ValueError("the kill and restart run with one server; with several, set kill_at=None")
        if self.kill_at is not None and not 0 < self.kill_at < 1:
            raise ValueError(f"kill_at must be within (0, 1) or None, got {self.kill_at}")
        unknown = {name for name, _ in self.mix} - set(TOOLS)
        if unknown:
            raise ValueError(f"unknown tools {sorted(unknown)} in mix; choose from {list(TOOLS)}")


@dataclass
class Memory:
    """A memory a client sent: acknowledged (with its id) or interrupted by the kill (id unknown)."""

    token: str
    content: str
    tag: str
    id: str | None = None
    acknowledged: bool = False
    revision: int = 0  # acknowledged updates
    deleted_at: float | None = None  # perf_counter when its deletion was acknowledged


@dataclass
class LoadResult:
    """What one run did and found; `errors` lists every failed call or check (empty = the target met)."""

    config: dict[str, Any]
    seconds: float = 0.0
    calls: int = 0
    latencies: dict[str, list[float]] = field(default_factory=lambda: {tool: [] for tool in TOOLS})
    errors: list[str] = field(default_factory=list)
    interrupted: int = 0
    acknowledged: int = 0
    acknowledged_before_kill: int = 0
    checked_after_restart: int = 0
    in_flight_stores: int = 0
    in_flight_stores_found: int = 0
    in_flight_changes: int = 0  # updates and deletes in flight at the kill
    updates: int = 0
    deletes: int = 0
    checked_at_end: int = 0
    killed: bool = False
    restart_seconds: float | None = None
    pause_seconds: float = 0.0  # from the kill to the clients going on (verify, restart, checks)
    verify_after_kill: list[str] = field(default_factory=list)
    verify_at_end: list[str] = field(default_factory=list)
    documents_at_end: int | None = None
    server_log: str = ""

    @property
    def calls_per_second(self) -> float:
        """Completed calls per second of load (the pause for the kill and the checks left out)."""
        load = self.seconds - self.pause_seconds
        return self.calls / load if load > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["calls_per_second"] = round(self.calls_per_second, 2)
        return record


# ------------------------------------------------------------------------------------------ the index
def memory_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """`n` synthetic memories (JSONL objects) over a few topics, one tag each, of different ages."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18)))
        rows.append(
            {
                "id": f"mem-seed-{i:05d}",
                "content": f"Note {i} on {topic}: {words}.",
                "tags": [topic],
                "created_at": f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T12:00:00Z",
            }
        )
    return rows


def build_index(folder: Path, memories: int, seed: int = 0) -> Path:
    """A wordllama index of `memory_rows(memories)` at `folder/index` (its own embeddings cache)."""
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths

    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "memories.jsonl"
    source.write_text(
        "".join(json.dumps(row) + "\n" for row in memory_rows(memories, seed)), encoding="utf-8"
    )
    index_dir = folder / "index"
    index_paths(
        [source],
        index_dir,
        IndexConfig(models=("wordllama",)),
        progress=False,
        cache_path=index_dir / "embeddings.duckdb",
    )
    return index_dir


# ----------------------------------------------------------------------------------------- the server
def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServerProcess:
    """`hybridlab mcp --transport streamable-http` on loopback, in its own process group (so a SIGKILL
    takes whatever it started with it); stderr is kept for error messages."""

    def __init__(self, index_dir: Path, port: int | None = None, extra_args: Sequence[str] = ()) -> None:
        self.index_dir = index_dir
        self.port = port or free_port()
        self.extra_args = tuple(extra_args)
        self.process: subprocess.Popen | None = None
        self.stderr: list[bytes] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self, timeout: float = 120.0) -> float:
        """Start the server and wait until it accepts connections (on a new port if another process
        took this one); returns the seconds that took."""
        started = time.perf_counter()
        for _attempt in range(3):
            command = [
                sys.executable,
                "-m",
                "hybridlab.cli",
                "mcp",
                "--index",
                str(self.index_dir),
                "--transport",
                "streamable-http",
                "--port",
                str(self.port),
                *self.extra_args,
            ]
            env = {**os.environ, **offline_environment()}
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
            threading.Thread(
                target=lambda p=self.process, out=self.stderr: out.extend(p.stderr), daemon=True
            ).start()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                    return time.perf_counter() - started
                except OSError:
                    time.sleep(0.05)
            self.kill()
            if "address already in use" not in self.log().lower():
                break
            self.port = free_port()
        raise RuntimeError(f"the MCP server did not start on port {self.port}: {self.log()[-3000:]}")

    def log(self) -> str:
        return b"".join(self.stderr).decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL the server's process group and reap it."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (the server commits and exits), SIGKILL after `timeout`; returns the exit code."""
        if self.process is None or self.process.poll() is not None:
            return 0 if self.process is None else self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.process.returncode


# ---------------------------------------------------------------------------------------- the clients
def client_tag(n: int) -> str:
    """Client `n`'s tag, on each of its memories. No memory's text holds a tag, so a search for a
    memory's content never recognises tags in it: what it finds depends on BM25 and the vectors
    alone (a query naming a tag boosts every memory wearing it)."""
    return f"loader{n}"


class _Load:
    """The shared state of one run: call slots, acknowledged memories, the kill and the restart."""

    def __init__(self, config: LoadConfig, servers: Sequence[ServerProcess], index_dir: Path) -> None:
        self.config = config
        self.servers = list(servers)
        self.server = self.servers[0]  # the one killed and restarted
        self.index_dir = index_dir
        self.result = LoadResult(config=asdict(config))
        self.memories: list[Memory] = []  # acknowledged, in the order of their acknowledgement
        self.own: dict[int, list[Memory]] = {n: [] for n in range(config.clients)}
        self.in_flight: dict[int, Memory] = {}  # client -> the store it is waiting for
        self.changing: dict[int, tuple[str, Memory, str | None]] = {}  # client -> (tool, memory, new text)
        self.interrupted_changes: list[tuple[int, tuple[str, Memory, str | None]]] = []
        self.reading: dict[
            str, int
        ] = {}  # memory id -> calls checking it now (not updated or deleted meanwhile)
        self.updates = self.deletes = 0
        self.current: dict[int, str] = {}  # client -> the tool it is calling
        self.interrupted_stores: list[tuple[int, Memory]] = []
        self.claimed = 0
        self.kill_after = None if config.kill_at is None else max(1, round(config.calls * config.kill_at))
        self.kill_requested = asyncio.Event()
        self.killed = False  # set just before the SIGKILL: a failure from then on is the kill's
        self.parked = 0
        self.resume = asyncio.Event()
        self.tokens: set[str] = set()

    def token(self, rng: random.Random) -> str:
        """A made-up word no other memory holds (letters only, so every tokenizer keeps it whole)."""
        while True:
            word = "zq" + "".join(rng.choice(string.ascii_lowercase) for _ in range(10))
            if word not in self.tokens:
                self.tokens.add(word)
                return word

    def error(self, message: str) -> None:
        self.result.errors.append(message)

    def live(self, rng: random.Random, memories: Sequence[Memory]) -> Memory | None:
        """A random acknowledged memory not deleted and not being changed."""
        changing = {memory.id for _, memory, _ in self.changing.values()}
        choices = [m for m in memories if m.deleted_at is None and m.id not in changing]
        return rng.choice(choices) if choices else None

    def deleted_returned(self, tool: str, started: float, ids: Sequence[str]) -> None:
        """An error for each of `ids` whose deletion was acknowledged before the call started."""
        gone = {m.id: m.deleted_at for m in self.memories if m.deleted_at is not None}
        for doc_id in ids:
            if doc_id in gone and gone[doc_id] < started:
                self.error(f"{tool} returned {doc_id}, deleted before the call")

    @contextlib.contextmanager
    def checking(self, memory: Memory | None):
        """Hold `memory` for a read and its check: its owner does not update or delete it meanwhile."""
        if memory is not None:
            self.reading[memory.id] = self.reading.get(memory.id, 0) + 1
        try:
            yield memory
        finally:
            if memory is not None:
                self.reading[memory.id] -= 1

    async def change(self, client: Any, n: int, rng: random.Random, tool: str) -> None:
        """Update or delete one of client `n`'s own memories that nobody reads now."""
        memory = self.live(rng, [m for m in self.own[n] if not self.reading.get(m.id)])
        if memory is None:
            await self.call(client, "search_by_tag", {"tags": [client_tag(n)], "limit": 1})
            return
        new = (
            (
                f"The {memory.token} now goes with the {' '.join(rng.choice(WORDS) for _ in range(rng.randint(4, 12)))} "
                f"(revision {memory.revision + 1})."
            )
            if tool == "update_memory"
            else None
        )
        self.changing[n] = (tool, memory, new)
        arguments = {"memory_id": memory.id, "content": new} if new else {"ids": [memory.id]}
        found = await self.call(client, tool, arguments)
        del self.changing[n]
        if found is None:
            return
        if new is not None:
            memory.content, memory.revision = new, memory.revision + 1
            self.own[n].remove(memory)
            self.own[n].append(memory)  # the newest by update time now
            self.updates += 1
        elif found["ids"] != [memory.id]:
            self.error(f"delete_memory {memory.id}: deleted {found['ids']}")
        else:
            memory.deleted_at = time.perf_counter()
            self.own[n].remove(memory)
            self.deletes += 1

    # -- one call ---------------------------------------------------------------------------------
    async def call(self, client: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """The structured result of one call, its latency recorded; None (and an error) when the call
        failed. A failure after the kill is re-raised: the client's session handles it."""
        started = time.perf_counter()
        try:
            result = await asyncio.wait_for(client.call_tool(tool, arguments), CALL_TIMEOUT)
        except Exception as error:
            if self.killed:
                raise
            self.error(f"{tool}: {type(error).__name__}: {error}")
            return None
        self.result.latencies[tool].append(time.perf_counter() - started)
        if result.is_error:
            self.error(f"{tool} {json.dumps(arguments)[:200]}: tool error: {result.content[0].text[:300]}")
            return None
        return result.structured_content

    async def one(self, client: Any, n: int, rng: random.Random, tool: str) -> None:
        """One call of `tool` by client `n`, with its check."""
        if tool == "store_memory":
            token = self.token(rng)
            memory = Memory(
                token,
                f"The {token} goes with the "
                f"{' '.join(rng.choice(WORDS) for _ in range(rng.randint(4, 12)))}.",
                client_tag(n),
            )
            self.in_flight[n] = memory
            found = await self.call(client, tool, {"content": memory.content, "tags": [memory.tag]})
            del self.in_flight[n]
            if found is not None:
                memory.id, memory.acknowledged = found["id"], True
                self.memories.append(memory)
                self.own[n].append(memory)
            return
        if tool in ("update_memory", "delete_memory"):
            await self.change(client, n, rng, tool)
            return
        started = time.perf_counter()
        if tool == "search":
            with self.checking(self.live(rng, self.memories)) as target:
                query = target.content if target else " ".join(rng.sample(WORDS, 3))
                found = await self.call(client, tool, {"query": query, "limit": SEARCH_LIMIT})
                ids = [hit["doc_id"] for hit in found["results"]] if found is not None else []
                self.deleted_returned(tool, started, ids)
                if found is not None and target is not None and target.id not in ids:
                    self.error(
                        f"search {target.token!r}: acknowledged memory {target.id} not in the top "
                        f"{SEARCH_LIMIT}: {ids}"
                    )
            return
        if tool == "search_by_tag":
            newest = self.own[n][-1] if self.own[n] else None
            found = await self.call(client, tool, {"tags": [client_tag(n)], "limit": 5})
            if found is not None:
                self.deleted_returned(tool, started, [hit["doc_id"] for hit in found["results"]])
            if found is not None and newest is not None:
                first = found["results"][0]["doc_id"] if found["results"] else None
                if first != newest.id:
                    self.error(
                        f"search_by_tag {client_tag(n)}: newest acknowledged {newest.id}, first result {first}"
                    )
            return
        deleted = [m for m in self.memories if m.deleted_at is not None]
        if deleted and rng.random() < 0.2:  # a deleted memory: not found
            result = await asyncio.wait_for(
                client.call_tool(tool, {"doc_id": rng.choice(deleted).id}), CALL_TIMEOUT
            )
            self.result.latencies[tool].append(time.perf_counter() - started)
            if not result.is_error:
                self.error(f"get_document returned deleted {result.structured_content['doc_id']}")
            return
        with self.checking(self.live(rng, self.memories)) as target:
            doc_id = target.id if target else f"mem-seed-{rng.randrange(self.config.memories):05d}"
            found = await self.call(client, tool, {"doc_id": doc_id})
            if found is not None and target is not None and found["text"] != target.content:
                self.error(
                    f"get_document {doc_id}: text {found['text'][:80]!r} != stored {target.content[:80]!r}"
                )

    # -- the clients ----------------------------------------------------------------------------------
    def claim(self) -> bool:
        if self.claimed >= self.config.calls:
            return False
        self.claimed += 1
        return True

    async def client(self, n: int) -> None:
        """Client `n`: sessions (a new one after the restart) making calls until every slot is taken."""
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        rng = random.Random(self.config.seed * 1000 + n)
        server = self.servers[n % len(self.servers)]
        tools, weights = zip(*self.config.mix, strict=True)
        failures = 0  # sessions in a row that broke without the kill
        while self.claimed < self.config.calls:
            try:
                async with Client(streamable_http_client(server.url, terminate_on_close=False)) as client:
                    while self.claim():
                        tool = self.current[n] = rng.choices(tools, weights)[0]
                        await self.one(client, n, rng, tool)
                        del self.current[n]
                        failures = 0
                        self.result.calls += 1
                        if self.kill_after is not None and self.result.calls >= self.kill_after:
                            self.kill_requested.set()
                    return
            except Exception as error:  # the session broke (the SDK raises an exception group)
                tool = self.current.pop(n, None)
                if not self.killed:  # an error; the call is done (failed), the client reconnects
                    self.error(f"client {n}: the session failed during {tool}: {error!r}"[:500])
                    self.result.calls += tool is not None
                    failures += 1
                    if failures >= 3 or server.process is None or server.process.poll() is not None:
                        raise RuntimeError(
                            f"client {n} cannot reach the server: {server.log()[-3000:]}"
                        ) from error
                    continue
                if tool is not None:  # interrupted by the kill: not done, its slot goes back
                    self.claimed -= 1
                    self.result.interrupted += 1
                if n in self.in_flight:
                    self.interrupted_stores.append((n, self.in_flight.pop(n)))
                if n in self.changing:
                    self.interrupted_changes.append((n, self.changing.pop(n)))
            self.parked += 1
            await self.resume.wait()

    # -- the kill and the restart -----------------------------------------------------------------
    async def crash_and_restart(self, running: list[asyncio.Task]) -> None:
        """SIGKILL the server once `kill_after` calls are done, wait for every client to notice, verify
        the index, restart the server, check what was acknowledged before; then let the clients go on."""
        kill = asyncio.create_task(self.kill_requested.wait())
        clients = asyncio.gather(*running, return_exceptions=True)
        await asyncio.wait({kill, clients}, return_when=asyncio.FIRST_COMPLETED)
        if not kill.done():  # cannot happen unless calls went uncounted: say so rather than wait forever
            kill.cancel()
            self.error("every call was done before the kill was due")
            return
        paused = time.perf_counter()
        self.killed = True
        await asyncio.to_thread(self.server.kill)
        self.result.killed = True
        while self.parked < sum(not task.done() for task in running):
            await asyncio.sleep(0.01)
        from hybridlab.index.admin.verify import verify

        self.result.verify_after_kill = await asyncio.to_thread(verify, self.index_dir)
        for problem in self.result.verify_after_kill:
            self.error(f"verify after the kill: {problem}")
        self.result.restart_seconds = await asyncio.to_thread(self.server.start)
        self.result.acknowledged_before_kill = len(self.memories)
        await self.check_through_server()
        self.killed = False
        self.parked = 0
        self.result.pause_seconds = time.perf_counter() - paused
        self.resume.set()

    async def check_through_server(self) -> None:
        """Through the restarted server: every acknowledged memory is there, whole; every store that
        was in flight at the kill is either absent or whole (and then counted as stored)."""
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with Client(streamable_http_client(self.server.url)) as client:

            async def structured(tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
                result = await client.call_tool(tool, arguments)
                if result.is_error:
                    self.error(f"after restart, {tool} {arguments}: {result.content[0].text[:300]}")
                    return None
                return result.structured_content

            async def check(memory: Memory) -> None:
                if memory.deleted_at is not None:  # gone, for good
                    if not (await client.call_tool("get_document", {"doc_id": memory.id})).is_error:
                        self.error(f"after restart, deleted {memory.id} is back")
                    found = await structured("search", {"query": memory.content, "limit": SEARCH_LIMIT})
                    if found is not None and memory.id in [hit["doc_id"] for hit in found["results"]]:
                        self.error(f"after restart, searching the content of deleted {memory.id} finds it")
                    self.result.checked_after_restart += 1
                    return
                document = await structured("get_document", {"doc_id": memory.id})
                if document is not None and document["text"] != memory.content:
                    self.error(
                        f"after restart, {memory.id} reads {document['text'][:80]!r}, "
                        f"stored {memory.content[:80]!r}"
                    )
                found = await structured("search", {"query": memory.content, "limit": SEARCH_LIMIT})
                if found is not None and memory.id not in [hit["doc_id"] for hit in found["results"]]:
                    self.error(f"after restart, searching the content of acknowledged {memory.id} misses it")
                self.result.checked_after_restart += 1

            for n, (tool, memory, new) in self.interrupted_changes:  # each either done or not, whole
                self.result.in_flight_changes += 1
                result = await client.call_tool("get_document", {"doc_id": memory.id})
                text = None if result.is_error else result.structured_content["text"]
                if tool == "delete_memory" and text is None:
                    memory.deleted_at = time.perf_counter()
                    self.own[n].remove(memory)
                elif text == new and new is not None:
                    memory.content, memory.revision = new, memory.revision + 1
                    self.own[n].remove(memory)
                    self.own[n].append(memory)
                elif text != memory.content:
                    self.error(
                        f"after restart, the {tool} in flight left {memory.id} reading {str(text)[:80]!r}"
                    )
            memories = list(self.memories)
            for start in range(0, len(memories), self.config.clients):  # as many calls at once as clients
                await asyncio.gather(
                    *(check(memory) for memory in memories[start : start + self.config.clients])
                )
            self.result.in_flight_stores = len(self.interrupted_stores)
            for n, memory in self.interrupted_stores:
                found = await structured("search", {"query": memory.content, "limit": SEARCH_LIMIT})
                hits = [
                    hit["doc_id"]
                    for hit in (found or {"results": []})["results"]
                    if memory.token in hit["title"] + hit["snippet"]
                ]
                if not hits:
                    continue  # not committed before the kill: absent, as it may be
                document = await structured("get_document", {"doc_id": hits[0]})
                if document is not None and document["text"] != memory.content:
                    self.error(
                        f"after restart, the in-flight store {hits[0]} is half-written: "
                        f"{document['text'][:80]!r}"
                    )
                memory.id = hits[0]
                self.memories.append(memory)
                self.own[n].append(memory)
                self.result.in_flight_stores_found += 1

    async def run(self) -> None:
        """The clients (and the kill), at most `config.timeout` seconds."""
        started = time.perf_counter()
        running = [asyncio.create_task(self.client(n)) for n in range(self.config.clients)]
        tasks = list(running)
        if self.kill_after is not None:
            tasks.append(asyncio.create_task(self.crash_and_restart(running)))
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), self.config.timeout)
        finally:
            for task in tasks:
                task.cancel()
        self.result.seconds = time.perf_counter() - started


def check_index(index_dir: Path, memories: Sequence[Memory], result: LoadResult) -> None:
    """Open the index in this process: it verifies, and every memory is there, whole, and found by
    its token; the document count is the seed memories plus these."""
    from hybridlab.index.admin.verify import verify
    from hybridlab.search.engine import open_index

    result.verify_at_end = verify(index_dir)
    for problem in result.verify_at_end:
        result.errors.append(f"verify at the end: {problem}")
    index = open_index(index_dir)
    try:
        for memory in memories:
            if memory.deleted_at is not None:
                with contextlib.suppress(KeyError):
                    index.get_document(memory.id)
                    result.errors.append(f"at the end, deleted memory {memory.id} is there")
                if memory.id in [r.doc_id for r in index.search(memory.content, limit=SEARCH_LIMIT)]:
                    result.errors.append(f"at the end, searching the content of deleted {memory.id} finds it")
                result.checked_at_end += 1
                continue
            try:
                document = index.get_document(memory.id)
            except KeyError:
                result.errors.append(f"at the end, acknowledged memory {memory.id} is missing")
                continue
            if document.text != memory.content:
                result.errors.append(f"at the end, {memory.id} reads {document.text[:80]!r}")
            if memory.id not in [r.doc_id for r in index.search(memory.content, limit=SEARCH_LIMIT)]:
                result.errors.append(f"at the end, searching the content of {memory.id} misses it")
            if [r.doc_id for r in index.search(memory.token, limit=1, mode="bm25")] != [memory.id]:
                result.errors.append(
                    f"at the end, BM25 does not rank {memory.id} first for its token {memory.token!r}"
                )
            result.checked_at_end += 1
        result.documents_at_end = index.stats().documents
    finally:
        index.close()


def run_load(config: LoadConfig, folder: Path) -> LoadResult:
    """Build the index in `folder`, run the scenario (module docstring), check; the result lists
    every error (none = the target met)."""
    index_dir = build_index(folder, config.memories, config.seed)
    servers = [ServerProcess(index_dir) for _ in range(config.servers)]
    try:
        for server in servers:
            server.start()
        load = _Load(config, servers, index_dir)
        asyncio.run(load.run())
    finally:
        codes = [server.stop() for server in servers]
    result = load.result
    if result.errors:  # the servers' side of them (tracebacks of failed tools)
        result.server_log = "\n".join(server.log()[-20_000 // len(servers) :] for server in servers)
    for server, code in zip(servers, codes, strict=True):
        if code not in (0, -signal.SIGTERM):  # uvicorn re-raises the SIGTERM after its graceful shutdown
            result.errors.append(f"a server exited {code} on SIGTERM: {server.log()[-2000:]}")
    result.acknowledged = sum(memory.acknowledged for memory in load.memories)
    result.updates, result.deletes = load.updates, load.deletes
    check_index(index_dir, load.memories, result)
    deleted = sum(memory.deleted_at is not None for memory in load.memories)
    expected = config.memories + len(load.memories) - deleted
    if result.documents_at_end != expected:
        result.errors.append(
            f"{result.documents_at_end} documents at the end, expected {expected} "
            f"({config.memories} seed + {len(load.memories)} stored - {deleted} deleted)"
        )
    return result


# ------------------------------------------------------------------------------------ the benchmark
def run_figures(result: LoadResult) -> dict[str, Any]:
    """The figures of one run: calls/s, P50/P95 ms per tool, errors, memories checked, the kill."""
    from bench.common import percentile

    latency = {
        tool: {
            "calls": len(values),
            "p50_ms": round(1000 * percentile(values, 50), 1),
            "p95_ms": round(1000 * percentile(values, 95), 1),
        }
        for tool, values in result.latencies.items()
        if values
    }
    return {
        "calls": result.calls,
        "seconds": round(result.seconds, 1),
        "pause_seconds": round(result.pause_seconds, 1),
        "calls_per_second": round(result.calls_per_second, 1),
        "latency": latency,
        "errors": len(result.errors),
        "first_errors": result.errors[:5],
        "acknowledged": result.acknowledged,
        "acknowledged_before_kill": result.acknowledged_before_kill,
        "checked_after_restart": result.checked_after_restart,
        "checked_at_end": result.checked_at_end,
        "interrupted_calls": result.interrupted,
        "in_flight_stores": result.in_flight_stores,
        "in_flight_stores_found": result.in_flight_stores_found,
        "killed": result.killed,
        "updates": result.updates,
        "deletes": result.deletes,
        "in_flight_changes": result.in_flight_changes,
        "restart_seconds": None if result.restart_seconds is None else round(result.restart_seconds, 2),
        "verify_after_kill": result.verify_after_kill,
        "verify_at_end": result.verify_at_end,
        "documents_at_end": result.documents_at_end,
        "server_tracebacks": _tracebacks(result.server_log),
    }


def _tracebacks(log: str, limit: int = 3) -> list[str]:
    """The first tracebacks in a server log (a crashed tool logs one at ERROR)."""
    found, start = [], log.find("Traceback")
    while start >= 0 and len(found) < limit:
        end = log.find("\n20", start)  # the next timestamped log line
        found.append(log[start : end if end > 0 else None][:4000])
        start = log.find("Traceback", end) if end > 0 else -1
    return found


def code_version() -> str:
    """The commit of the checkout this package runs from (+ "-dirty" when the package has uncommitted
    changes)."""
    import hybridlab

    folder = Path(hybridlab.__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no", "--", "hybridlab"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def _median(runs: Sequence[dict[str, Any]], *keys: str) -> float | None:
    import statistics

    values = []
    for run in runs:
        value: Any = run
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            values.append(value)
    return round(statistics.median(values), 1) if values else None


def _markdown(record: dict[str, Any]) -> str:
    from bench.common import PERCENTILE_LABEL

    runs, config = record["runs"], record["config"]
    machine = record["machine"]
    mix = ", ".join(f"{tool} {share:.0%}" for tool, share in config["mix"])
    lines = [
        f"# MCP load with a SIGKILL mid-run ({record['date']})",
        "",
        f"Command: `{record['command']}` (code at {record['code']})",
        "",
        (
            f"Machine: {machine['cpu_model']}, {machine['cores']} cores, shared with other jobs (load average "
            f"{', '.join(f'{x:.1f}' for x in machine['load_average'])} at the start): absolute times vary."
        ),
        "",
        (
            f"Scenario (`bench.mcp_load`, the same as `tests/reliability/test_mcp_load.py`): a fresh "
            f"wordllama index of {config['memories']} synthetic memories per run; one `hybridlab mcp --transport "
            f"streamable-http` process on loopback; {config['clients']} MCP SDK clients (a session each) share "
            f"{config['calls']:,} calls ({mix}); after {config['kill_at']:.0%} of them the server's process group "
            "is SIGKILLed with calls in flight, the index verified, the server restarted on the same index and "
            "every memory acknowledged before the kill checked through it; then the clients reconnect and "
            "finish. At the end the index is verified again and every acknowledged memory checked in it "
            "(exact text; found by searching its content; first in BM25 for its unique token); the document "
            "count must be the seed plus every stored memory."
        ),
        "",
        f"## Results, {len(runs)} runs (medians; P50/P95 per run, {PERCENTILE_LABEL})",
        "",
        (
            "| run | calls | calls/s | errors | acknowledged | before kill (checked after restart) | "
            "in-flight stores at the kill (found after) | interrupted calls | restart s | verify | checked at end |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, run in enumerate(runs, 1):
        verified = "OK" if not run["verify_after_kill"] and not run["verify_at_end"] else "FAIL"
        lines.append(
            f"| {n} | {run['calls']} | {run['calls_per_second']} | {run['errors']} | {run['acknowledged']} | "
            f"{run['acknowledged_before_kill']} ({run['checked_after_restart']}) | {run['in_flight_stores']} "
            f"({run['in_flight_stores_found']}) | {run['interrupted_calls']} | {run['restart_seconds']} | "
            f"{verified} | {run['checked_at_end']} |"
        )
    lines += ["", "| tool | calls per run | P50 ms (median) | P95 ms (median) |", "|---|---|---|---|"]
    for tool in TOOLS:
        lines.append(
            f"| `{tool}` | {_median(runs, 'latency', tool, 'calls')} | "
            f"{_median(runs, 'latency', tool, 'p50_ms')} | {_median(runs, 'latency', tool, 'p95_ms')} |"
        )
    errors = sum(run["errors"] for run in runs)
    lines += [
        "",
        (
            f"- Median throughput: {_median(runs, 'calls_per_second')} calls/s (the load only; the pause "
            f"for the kill, verify, restart and checks — median {_median(runs, 'pause_seconds')} s — left "
            f"out); median wall time per run {_median(runs, 'seconds')} s."
        ),
        f"- Errors in all runs: {errors}" + ("." if not errors else f": {runs[0]['first_errors']}"),
        "",
    ]
    for run in runs:
        for traceback in run["server_tracebacks"][:1]:
            lines += ["A server traceback:", "", "```text", traceback, "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_load", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--calls", type=int, default=2000, help="completed tool calls per run, all clients together"
    )
    parser.add_argument("--clients", type=int, default=4, help="concurrent MCP sessions")
    parser.add_argument(
        "--kill-at",
        type=float,
        default=0.5,
        help="share of the calls after which the server is SIGKILLed (0 = no kill)",
    )
    parser.add_argument(
        "--servers", type=int, default=1, help="server processes on the one index (> 1: no kill)"
    )
    parser.add_argument(
        "--memories", type=int, default=200, help="synthetic memories in the index at the start"
    )
    parser.add_argument(
        "--mix",
        help="tool shares, e.g. store_memory=0.25,search=0.35,search_by_tag=0.2,"
        f"get_document=0.2 (default {','.join(f'{k}={v}' for k, v in MIX.items())})",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs, each on a fresh index and server")
    parser.add_argument("--out", help="output folder (default reports/bench/<date>-mcp-load)")
    args = parser.parse_args(argv)
    from bench.common import machine_info
    from hybridlab.config import apply_offline_environment
    from hybridlab.eval.datasets import REPO_ROOT

    apply_offline_environment()
    mix = tuple(MIX.items())
    if args.mix:
        mix = tuple(
            (name.strip(), float(share)) for name, share in (part.split("=") for part in args.mix.split(","))
        )
    config = LoadConfig(
        calls=args.calls,
        clients=args.clients,
        kill_at=args.kill_at or None,
        memories=args.memories,
        mix=mix,
        servers=args.servers,
    )
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    machine = machine_info()
    runs = []
    for n in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-mcp-load-") as tmp:
            result = run_load(LoadConfig(**{**asdict(config), "seed": n, "mix": mix}), Path(tmp))
        runs.append(run_figures(result))
        print(
            f"run {n + 1}: {result.calls} calls, {result.calls_per_second:.1f} calls/s, {len(result.errors)} errors, "
            f"{result.acknowledged} memories acknowledged",
            file=sys.stderr,
            flush=True,
        )
    given = sys.argv[1:] if argv is None else argv
    record = {
        "date": date,
        "command": " ".join(["python -m bench.mcp_load", *given]),
        "code": code_version(),
        "config": asdict(config),
        "machine": machine,
        "runs": runs,
    }
    out = Path(args.out) if args.out else REPO_ROOT / "reports" / "bench" / f"{date}-mcp-load"
    out.mkdir(parents=True, exist_ok=True)
    (out / "mcp-load.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text(_markdown(record), encoding="utf-8")
    print(_markdown(record))
    return 1 if any(run["errors"] for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
