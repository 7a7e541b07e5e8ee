"""`mcp`: serving an index to AI assistants (the server is :func:`hybridlab.server.mcp.create_server`;
it and the MCP SDK load when the command runs, so `--help` stays instant)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from hybridlab.cli.options import backend_args, encoder_options, index_arg
from hybridlab.errors import InvalidValueError
from hybridlab.server.stderr import StderrHandler

#: the serving process's records go out under the server's name, as they did when it ran the command
logger = logging.getLogger("hybridlab.server.mcp")


def add_mcp(sub: argparse._SubParsersAction) -> None:
    """The `mcp` command (hybridlab.server.mcp runs it)."""
    p = sub.add_parser("mcp", help="serve the index to AI assistants over MCP (stdio by default)")
    index_arg(p)
    p.add_argument("--config", help="exported config JSON (env HYBRIDLAB_* still override it)")
    p.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (loopback unless given)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--log-file", help="write logs here instead of stderr")
    encoder_options(p, documents=False)  # the queries' (and stored memories') device and dtype
    p.add_argument(
        "--lock-wait",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long store_memory waits for another process's writer lock (default 10)",
    )
    p.add_argument(
        "--commit-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="defer memory commits up to this long and batch them (default 0: each store_memory "
        "returns once committed); reads commit the queue first",
    )
    p.add_argument(
        "--wal-records",
        type=int,
        default=None,
        metavar="N",
        help="records (stores, updates, deletes) the write-ahead log holds before it is folded into "
        "a segment (default HYBRIDLAB_WAL_RECORDS or 64; 0: each one commits a generation)",
    )
    p.add_argument(
        "--project",
        metavar="NAME",
        help="the tools' default project (else env HYBRIDLAB_PROJECT; none: reads cover every project "
        'and memories are stored without one); a call\'s project= overrides it, project="*" reads all',
    )
    http = p.add_argument_group(
        "streamable-http security (docs/mcp.md#the-http-transport-as-a-shared-service)"
    )
    http.add_argument(
        "--auth-token-file",
        metavar="PATH",
        help="a file holding the bearer token every request must carry (or env HYBRIDLAB_MCP_TOKEN); "
        "required when --host is not loopback",
    )
    http.add_argument(
        "--allowed-host",
        action="append",
        dest="allowed_hosts",
        metavar="HOST[:PORT]",
        help="also accept this Host header (repeatable; 'name:*' = any port); default: the bound "
        "host and localhost/127.0.0.1/[::1], with the port",
    )
    http.add_argument(
        "--allowed-origin",
        action="append",
        dest="allowed_origins",
        metavar="ORIGIN",
        help="also accept requests whose Origin is this, e.g. https://mcp.example.org (repeatable); "
        "requests without Origin (non-browser clients) are always accepted",
    )
    http.add_argument(
        "--max-request-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="largest request body accepted (default 1048576); larger → 413",
    )
    backend_args(p)
    p.set_defaults(func=cmd_mcp)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point fd 1 (and sys.stdout) at stderr for the duration, so library prints cannot reach a
    stdio protocol stream; restored afterwards."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _configure_logging(log_file: str | None, verbose: int) -> None:
    level = (
        logging.INFO if verbose <= 1 else logging.DEBUG
    )  # INFO at least: the server logs its start and commits
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8") if log_file else StderrHandler()
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # Our own records from `level` up, the libraries' (bm25s logs at DEBUG on its own) from WARNING up.
    handler.addFilter(
        lambda record: record.levelno >= (level if record.name.startswith("hybridlab") else logging.WARNING)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


HTTP_ONLY_OPTIONS = {
    "auth_token_file": "--auth-token-file",
    "allowed_hosts": "--allowed-host",
    "allowed_origins": "--allowed-origin",
    "max_request_bytes": "--max-request-bytes",
}


def _http_security(args: argparse.Namespace) -> Any:
    """The HTTP transport's token, allow-lists and size cap from the CLI options and the environment;
    None over stdio (where the HTTP-only options are an error)."""
    given = [flag for key, flag in HTTP_ONLY_OPTIONS.items() if getattr(args, key, None)]
    if args.transport == "stdio":
        if given:
            raise InvalidValueError(f"{', '.join(given)}: only for --transport streamable-http, not stdio")
        return None
    from hybridlab.server.http_auth import DEFAULT_MAX_REQUEST_BYTES, http_security

    max_bytes = getattr(args, "max_request_bytes", None)
    return http_security(
        args.host,
        args.port,
        token_file=getattr(args, "auth_token_file", None),
        allowed_hosts=getattr(args, "allowed_hosts", None) or (),
        allowed_origins=getattr(args, "allowed_origins", None) or (),
        max_request_bytes=DEFAULT_MAX_REQUEST_BYTES if max_bytes is None else max_bytes,
    )


def cmd_mcp(args: argparse.Namespace) -> int:
    """`hybridlab mcp`: serve an index over stdio (default) or streamable HTTP (a bearer token required
    beyond loopback; Host/Origin allow-lists; a request size cap)."""
    from hybridlab.server.http_auth import transport_security_settings
    from hybridlab.server.mcp import create_server

    _configure_logging(args.log_file, getattr(args, "verbose", 0))
    security = _http_security(args)  # before the index opens: a refused start is immediate
    os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars from the libraries, not even on stderr
    started = time.perf_counter()
    client, backend, backend_name = _backend(args)
    try:
        with stdout_to_stderr():
            server = create_server(
                args.index_dir,
                args.config,
                warm=True,
                lock_wait=args.lock_wait,
                commit_delay=args.commit_delay,
                auth_token=security and security.token,
                backend=backend,
                backend_name=backend_name,
                wal_records=getattr(args, "wal_records", None),
                project=getattr(args, "project", None),
            )
        index = server.service.index
        logger.info(
            "serving %s (%d chunks, generation %s, %s backend) over %s; opened in %.2fs",
            args.index_dir,
            index.n_chunks,
            index.manifest.generation,
            backend_name,
            args.transport,
            time.perf_counter() - started,
        )
        if security is None:
            server.run("stdio")
        else:
            logger.info("HTTP on %s:%d/mcp: %s", args.host, args.port, security.describe())
            server.run(
                "streamable-http",
                host=args.host,
                port=args.port,
                max_request_body_size=security.max_request_bytes,
                transport_security=transport_security_settings(security),
            )
    finally:
        if client is not None:
            client.close()
    return 0


def _backend(args: argparse.Namespace) -> tuple[Any, Callable[[Any], Any] | None, str]:
    """(Qdrant client, snapshot factory, name) of `--backend`; (None, None, "local") for the local one.
    On Qdrant every generation the server opens is synced into the collection first (a full export
    when the collection is new or incompatible), so memories it stores are searchable there."""
    if getattr(args, "backend", "local") != "qdrant":
        for flag in ("qdrant_url", "qdrant_path", "qdrant_collection"):
            if getattr(args, flag, None):
                raise InvalidValueError(f"--{flag.replace('_', '-')} needs --backend qdrant")
        return None, None, "local"
    from hybridlab.index.admin import qdrant as qdrant_mirror
    from hybridlab.search import qdrant

    if not (args.qdrant_url or args.qdrant_path):
        raise InvalidValueError("--backend qdrant needs --qdrant-url URL or --qdrant-path DIR")
    client = qdrant_mirror.connect(url=args.qdrant_url, path=args.qdrant_path)
    where = args.qdrant_url or f"local mode at {args.qdrant_path}"
    return client, qdrant.qdrant_backend(client, args.qdrant_collection, sync=True), f"qdrant ({where})"
