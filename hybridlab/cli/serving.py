"""`mcp`: serving an index to AI assistants (hybridlab.server.mcp runs it)."""

from __future__ import annotations

import argparse

from hybridlab.cli.options import backend_args, delegate, encoder_options, index_arg


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
    p.set_defaults(func=delegate("hybridlab.server.mcp", "cli_mcp"))
