"""The streamable-HTTP transport as a shared service: a real `hybridlab mcp` process on a free loopback
port, driven by a real HTTP client (httpx) for the refusals and by the SDK's streamable-HTTP client for
the sessions. The server checks the token first (401), then the body size (413), then Host (421) and
Origin (403); see docs/mcp.md#the-http-transport-as-a-shared-service.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hybridlab.server.http_auth import (
    DEFAULT_MAX_REQUEST_BYTES,
    TOKEN_ENV,
    StaticTokenVerifier,
    http_security,
    is_loopback,
)

REPO = Path(__file__).resolve().parents[2]
MEMORIES = REPO / "ground_truth" / "memories" / "memories.jsonl"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
TOKEN = secrets.token_urlsafe(32)
CAP = 64 * 1024
EXTRA_ORIGIN = "https://client.example"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-http", "version": "0"},
    },
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    return {**env, **ENV, "PYTHONPATH": str(REPO), **extra}


def mcp_command(index_dir: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hybridlab.cli",
        "mcp",
        "--index",
        str(index_dir),
        "--transport",
        "streamable-http",
        *args,
    ]


def start_server(
    index_dir: Path, *args: str, timeout: float = 60.0
) -> tuple[subprocess.Popen, int, list[bytes]]:
    """A server on a free loopback port, once it accepts connections (a new port if another process
    took the probed one in between)."""
    for _attempt in range(3):
        port = free_port()
        process = subprocess.Popen(
            mcp_command(index_dir, "--port", str(port), *args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=server_env(),
            cwd=str(REPO),
        )
        stderr: list[bytes] = []
        threading.Thread(target=lambda p=process, out=stderr: out.extend(p.stderr), daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return process, port, stderr
            except OSError:
                time.sleep(0.1)
        process.kill()
        process.wait(timeout=10)
        if b"address already in use" not in b"".join(stderr).lower():
            break
    raise AssertionError(
        f"the server did not start; stderr: {b''.join(stderr).decode(errors='replace')[-3000:]}"
    )


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    from hybridlab.index.write.build import index_paths

    folder = tmp_path_factory.mktemp("mcp-http")
    source = folder / "memories.jsonl"
    source.write_text(
        "".join(MEMORIES.read_text(encoding="utf-8").splitlines(keepends=True)[:20]), encoding="utf-8"
    )
    index_paths([source], folder / "index", progress=False)
    return folder / "index"


@pytest.fixture(scope="module")
def server(index_dir, tmp_path_factory):
    """(base URL, port) of a server requiring TOKEN, capping bodies at CAP, also allowing EXTRA_ORIGIN."""
    token_file = tmp_path_factory.mktemp("secret") / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    process, port, stderr = start_server(
        index_dir,
        "--auth-token-file",
        str(token_file),
        "--max-request-bytes",
        str(CAP),
        "--allowed-origin",
        EXTRA_ORIGIN,
    )
    try:
        yield f"http://127.0.0.1:{port}/mcp", port
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    log = b"".join(stderr).decode(errors="replace")
    assert TOKEN not in log  # the token never reaches the log


def post(url: str, body: bytes | object, **headers: str):
    """(status, headers, first bytes of the body) of one POST; the response is not read to the end."""
    import httpx

    content = body if isinstance(body, bytes) or not isinstance(body, dict) else json.dumps(body).encode()
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", url, content=content, headers={**ACCEPT, **headers}) as response,
    ):
        first = next(response.iter_bytes(), b"") if response.status_code != 200 else b""
        return response.status_code, response.headers, first


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# ------------------------------------------------------------------------------ the options, no server
@pytest.mark.slow
def test_binding_beyond_loopback_without_a_token_refuses_to_start(index_dir):
    started = time.perf_counter()
    done = subprocess.run(
        mcp_command(index_dir, "--host", "0.0.0.0", "--port", str(free_port())),
        check=False,
        capture_output=True,
        text=True,
        env=server_env(),
        cwd=str(REPO),
        timeout=60,
    )
    assert done.returncode == 2
    assert "refusing to serve on 0.0.0.0:" in done.stderr and "without a bearer token" in done.stderr
    assert "--auth-token-file" in done.stderr and TOKEN_ENV in done.stderr
    assert time.perf_counter() - started < 30  # refused before the index opens


def test_security_options_resolve_with_loopback_defaults_and_clear_errors(tmp_path):
    assert (
        is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("[::1]") and is_loopback("localhost")
    )
    assert is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("192.168.1.5")
    assert not is_loopback("myhost")

    local = http_security("127.0.0.1", 8765, environ={})
    assert local.token is None and local.max_request_bytes == DEFAULT_MAX_REQUEST_BYTES
    assert local.allowed_hosts == ("127.0.0.1:8765", "localhost:8765", "[::1]:8765")
    assert local.allowed_origins == ("http://127.0.0.1:8765", "http://localhost:8765", "http://[::1]:8765")

    shared = http_security(
        "0.0.0.0",
        9000,
        environ={TOKEN_ENV: TOKEN},
        allowed_hosts=["MCP.example.org:*"],
        allowed_origins=["https://mcp.example.org"],
        max_request_bytes=4096,
    )
    assert (shared.token, shared.token_source, shared.max_request_bytes) == (TOKEN, TOKEN_ENV, 4096)
    assert shared.allowed_hosts == (
        "0.0.0.0:9000",
        "127.0.0.1:9000",
        "localhost:9000",
        "[::1]:9000",
        "mcp.example.org:*",
    )
    assert shared.allowed_origins[-1] == "https://mcp.example.org"
    assert TOKEN not in repr(shared) and TOKEN not in shared.describe()
    assert http_security("::", 9000, environ={TOKEN_ENV: TOKEN}).allowed_hosts[0] == "[::]:9000"

    token_file = tmp_path / "token"
    token_file.write_text(" file-token-0123456789abcdef\n", encoding="utf-8")
    from_file = http_security("10.0.0.1", 9000, token_file=token_file, environ={TOKEN_ENV: TOKEN})
    assert (from_file.token, from_file.token_source) == ("file-token-0123456789abcdef", "--auth-token-file")

    with pytest.raises(ValueError, match=r"refusing to serve on \[::\]:9000 without a bearer token"):
        http_security("::", 9000, environ={})
    with pytest.raises(ValueError, match="refusing to serve on 192.168.1.5:80"):
        http_security("192.168.1.5", 80, environ={TOKEN_ENV: "  "})
    with pytest.raises(ValueError, match="has 5 characters; use at least 16"):
        http_security("127.0.0.1", 9000, environ={TOKEN_ENV: "short"})
    with pytest.raises(ValueError, match="characters a Bearer header cannot carry"):
        http_security("127.0.0.1", 9000, environ={TOKEN_ENV: "a token with spaces in it"})
    with pytest.raises(FileNotFoundError, match="auth token file .* does not exist"):
        http_security("127.0.0.1", 9000, token_file=tmp_path / "missing", environ={})
    (tmp_path / "empty").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="auth token file .* is empty"):
        http_security("127.0.0.1", 9000, token_file=tmp_path / "empty", environ={})
    with pytest.raises(ValueError, match="--allowed-host 'http://x.org' is not a Host header value"):
        http_security("127.0.0.1", 9000, environ={}, allowed_hosts=["http://x.org"])
    with pytest.raises(ValueError, match="--allowed-origin 'https://x.org/app' is not an origin"):
        http_security("127.0.0.1", 9000, environ={}, allowed_origins=["https://x.org/app"])
    with pytest.raises(ValueError, match="--allowed-origin '\\*' is not an origin"):
        http_security("127.0.0.1", 9000, environ={}, allowed_origins=["*"])
    with pytest.raises(ValueError, match="--max-request-bytes must be a positive number of bytes, not 0"):
        http_security("127.0.0.1", 9000, environ={}, max_request_bytes=0)


def test_the_token_verifier_accepts_exactly_the_token():
    verifier = StaticTokenVerifier(TOKEN)
    assert asyncio.run(verifier.verify_token(TOKEN)).client_id == "hybridlab-shared-token"
    for wrong in (
        "",
        TOKEN[:-1],
        TOKEN + "x",
        TOKEN.upper() if TOKEN.upper() != TOKEN else TOKEN + "y",
        "ünïcode",
    ):
        assert asyncio.run(verifier.verify_token(wrong)) is None


# ---------------------------------------------------------------------------------- a real server
@pytest.mark.slow
def test_requests_without_the_right_token_get_401(server):
    url, _port = server
    for headers in (
        {},
        bearer(secrets.token_urlsafe(32)),
        bearer(TOKEN[:-1]),
        bearer(TOKEN + "A"),
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
    ):
        status, response_headers, body = post(url, INITIALIZE, **headers)
        assert status == 401, headers
        assert response_headers["www-authenticate"].startswith("Bearer ")
        assert 'error="invalid_token"' in response_headers["www-authenticate"]
        assert json.loads(body)["error"] == "invalid_token"
    assert post(url, INITIALIZE, **bearer())[0] == 200


@pytest.mark.slow
def test_foreign_origin_and_wrong_host_are_refused(server):
    url, port = server
    assert post(url, INITIALIZE, Origin="http://evil.example", **bearer())[0] == 403
    assert (
        post(url, INITIALIZE, Origin=f"http://localhost:{port + 1}", **bearer())[0] == 403
    )  # another local app
    assert post(url, INITIALIZE, Origin="http://evil.example")[0] == 401  # the token is checked first
    assert post(url, INITIALIZE, Host=f"evil.example:{port}", **bearer())[0] == 421
    assert post(url, INITIALIZE, Host="127.0.0.1", **bearer())[0] == 421  # the port is part of the allow-list
    for origin in (EXTRA_ORIGIN, f"http://localhost:{port}", f"http://127.0.0.1:{port}"):
        assert post(url, INITIALIZE, Origin=origin, **bearer())[0] == 200, origin
    assert post(url, INITIALIZE, Host=f"localhost:{port}", **bearer())[0] == 200


@pytest.mark.slow
def test_oversized_bodies_get_413(server):
    url, _port = server

    def padded(size: int) -> bytes:
        message = {
            **INITIALIZE,
            "params": {**INITIALIZE["params"], "clientInfo": {"name": "", "version": "0"}},
        }
        bare = len(json.dumps(message).encode())
        message["params"]["clientInfo"]["name"] = "x" * (size - bare)
        body = json.dumps(message).encode()
        assert len(body) == size
        return body

    assert post(url, padded(CAP), **bearer())[0] == 200  # at the cap: served
    status, _headers, body = post(url, padded(CAP + 1), **bearer())  # declared by Content-Length
    assert (status, body) == (413, b"Request body too large")

    def chunks():  # no Content-Length: the cap is enforced on the streamed body
        big = padded(4 * CAP)
        for start in range(0, len(big), 8192):
            yield big[start : start + 8192]

    status, _headers, body = post(url, chunks(), **bearer())
    assert (status, body) == (413, b"Request body too large")
    assert post(url, padded(4 * CAP))[0] == 401  # without the token: 401 before the size matters


@pytest.mark.slow
def test_four_concurrent_clients_share_one_index(server):
    """4 SDK clients at once, each storing memories between searches; each then finds all 12."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    url, _port = server
    barrier = asyncio.Barrier(4)
    topics = ["lighthouse keeper", "glacier survey", "violin workshop", "orchard irrigation"]

    async def one_client(n: int) -> dict[str, str]:
        async with (
            create_mcp_http_client(headers=bearer()) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            stored = {}
            for k in range(3):
                content = f"Shared-service memory {k} from client {n} about the {topics[n]} number {k}."
                result = await client.call_tool(
                    "store_memory", {"content": content, "tags": ["shared-http", f"c{n}"]}
                )
                assert not result.is_error, result.content[0].text
                stored[result.structured_content["id"]] = content
                found = await client.call_tool("search", {"query": f"{topics[n]} number {k}", "limit": 3})
                assert not found.is_error, found.content[0].text
                assert result.structured_content["id"] in [
                    hit["doc_id"] for hit in found.structured_content["results"]
                ]
            await barrier.wait()
            tagged = await client.call_tool("search_by_tag", {"tags": ["shared-http"], "limit": 50})
            assert not tagged.is_error, tagged.content[0].text
            other = (n + 1) % 4
            found = await client.call_tool(
                "search",
                {"query": f"{topics[other]} memory from client {other}", "tags": [f"c{other}"], "limit": 5},
            )
            assert not found.is_error, found.content[0].text
            assert len(found.structured_content["results"]) == 3
            return {
                "stored": stored,
                "tagged": [hit["doc_id"] for hit in tagged.structured_content["results"]],
            }

    async def run() -> list[dict]:
        return await asyncio.gather(*(one_client(n) for n in range(4)))

    results = asyncio.run(asyncio.wait_for(run(), timeout=120))
    every_id = {doc_id for result in results for doc_id in result["stored"]}
    assert len(every_id) == 12
    for result in results:
        assert set(result["tagged"]) == every_id  # each client sees the others' memories
