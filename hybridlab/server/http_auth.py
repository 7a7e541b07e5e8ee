"""Securing the streamable-HTTP transport: a bearer token, Host/Origin allow-lists, a request size cap.
See docs/internals/search.md#http-auth."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridlab.errors import InvalidValueError, PathNotFoundError

logger = logging.getLogger(__name__)

TOKEN_ENV = "HYBRIDLAB_MCP_TOKEN"
DEFAULT_MAX_REQUEST_BYTES = 1 << 20  # 1 MiB: a 20,000-character memory is at most ~120 KB of JSON
MIN_TOKEN_LENGTH = 16
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
CLIENT_ID = "hybridlab-shared-token"
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750 §2.1 b64token: what may follow "Bearer "
_HOST_VALUE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._]+)(:(\d{1,5}|\*))?")
_ORIGIN = re.compile(r"(https?)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._]+)(:(\d{1,5}|\*))?")
_TOKEN_HINT = (
    "put a token in a file readable only by you and pass --auth-token-file PATH, or set "
    f"{TOKEN_ENV}; generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
)


@dataclass(frozen=True)
class HttpSecurity:
    """What the HTTP transport enforces. `token` None = no authentication (loopback only)."""

    token: str | None = field(repr=False)
    token_source: str | None
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    max_request_bytes: int

    def describe(self) -> str:
        """One log line, without the token."""
        auth = f"bearer token from {self.token_source}" if self.token else "no authentication (loopback)"
        return (
            f"{auth}; allowed Host {list(self.allowed_hosts)}; allowed Origin {list(self.allowed_origins)}; "
            f"request bodies up to {self.max_request_bytes} bytes"
        )


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback IP literals (127.0.0.0/8, ::1); any other name counts as beyond."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_with_port(host: str, port: int) -> str:
    """The Host header value a client sends for `host`:`port` (IPv6 literals in brackets)."""
    name = host.strip().lower()
    if ":" in name and not name.startswith("["):
        name = f"[{name}]"
    return f"{name}:{port}"


def default_allowed_hosts(host: str, port: int) -> tuple[str, ...]:
    """The bound host and the loopback forms, each with the port (and bare too on port 80)."""
    names = [host_with_port(host, port)] + [f"{name}:{port}" for name in LOOPBACK_NAMES]
    if port == 80:
        names += [name.rsplit(":", 1)[0] for name in names]
    return tuple(dict.fromkeys(names))


def _checked(option: str, value: str, pattern: re.Pattern[str], problem: str) -> str:
    """`value` lower-cased when `pattern` matches all of it, else ValueError: `option`, `value`, `problem`."""
    normal = value.strip().lower()
    if not pattern.fullmatch(normal):
        raise InvalidValueError(f"{option} {value!r} {problem}")
    return normal


def check_token(token: str, source: str) -> str:
    """`token` if usable as a bearer token (RFC 6750 characters, >= 16 long); else ValueError naming `source`."""
    if len(token) < MIN_TOKEN_LENGTH:
        raise InvalidValueError(
            f"the bearer token from {source} has {len(token)} characters; use at least "
            f"{MIN_TOKEN_LENGTH} ({_TOKEN_HINT})"
        )
    if not _B64TOKEN.fullmatch(token):
        raise InvalidValueError(
            f"the bearer token from {source} contains characters a Bearer header cannot carry; "
            "use letters, digits and - . _ ~ + / (optionally ending in =)"
        )
    return token


def read_token(
    token_file: str | os.PathLike | None, environ: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """(token, where it came from): the file wins over the `HYBRIDLAB_MCP_TOKEN` variable; (None, None) if
    neither is given. The token is never a command-line argument, where `ps` would show it."""
    if token_file is not None:
        path = Path(token_file)
        if not path.is_file():
            raise PathNotFoundError(f"auth token file {str(path)!r} does not exist")
        if os.name == "posix" and path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            logger.warning("auth token file %s is readable by other users; chmod 600 it", path)
        token = path.read_text(encoding="utf-8").strip()
        if not token:
            raise InvalidValueError(f"auth token file {str(path)!r} is empty")
        if environ.get(TOKEN_ENV):
            logger.info("using the token from --auth-token-file; %s is ignored", TOKEN_ENV)
        return check_token(token, f"--auth-token-file {path}"), "--auth-token-file"
    token = environ.get(TOKEN_ENV, "").strip()
    if not token:
        return None, None
    return check_token(token, TOKEN_ENV), TOKEN_ENV


def http_security(
    host: str,
    port: int,
    *,
    token_file: str | os.PathLike | None = None,
    environ: Mapping[str, str] | None = None,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> HttpSecurity:
    """What to enforce when serving on `host`:`port`; ValueError when binding beyond loopback without a
    token, or for a malformed option. `environ` defaults to `os.environ`."""
    if not 0 < port < 65536:
        raise InvalidValueError(f"--port {port} is not a TCP port (1..65535)", field="port")
    if max_request_bytes <= 0:
        raise InvalidValueError(
            f"--max-request-bytes must be a positive number of bytes, not {max_request_bytes}",
            field="max_request_bytes",
        )
    token, source = read_token(token_file, os.environ if environ is None else environ)
    if token is None and not is_loopback(host):
        raise InvalidValueError(
            f"refusing to serve on {host_with_port(host, port)} without a bearer token: anyone who "
            f"can reach the port could search and write the index; {_TOKEN_HINT}"
        )
    hosts = default_allowed_hosts(host, port) + tuple(
        _checked(
            "--allowed-host",
            h,
            _HOST_VALUE,
            "is not a Host header value; give 'name:port' (e.g. "
            "'mcp.example.org:8765'), 'name' for the default port of a proxy, or 'name:*' for any port",
        )
        for h in allowed_hosts
    )
    # pages served by this very server and its loopback names, and those given
    origins = tuple(f"http://{name}" for name in default_allowed_hosts(host, port)) + tuple(
        _checked(
            "--allowed-origin",
            o,
            _ORIGIN,
            "is not an origin; give 'scheme://name[:port]' with no path "
            "(e.g. 'https://mcp.example.org' or 'http://localhost:*')",
        )
        for o in allowed_origins
    )
    return HttpSecurity(
        token=token,
        token_source=source,
        allowed_hosts=tuple(dict.fromkeys(hosts)),
        allowed_origins=tuple(dict.fromkeys(origins)),
        max_request_bytes=max_request_bytes,
    )


def transport_security_settings(security: HttpSecurity) -> Any:
    """The SDK's DNS-rebinding settings for `security` (always enabled)."""
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(security.allowed_hosts),
        allowed_origins=list(security.allowed_origins),
    )


def auth_settings() -> Any:
    """The SDK's AuthSettings for a static token. It insists on an issuer URL, but with no
    `resource_server_url` and no authorization-server provider it mounts no OAuth routes and never reads
    it: the token is shared out of band, not issued by an authorization server."""
    from mcp.server.auth.settings import AuthSettings

    # pydantic validates the str into an AnyHttpUrl; mypy (without pydantic's plugin) sees only the field type
    return AuthSettings(issuer_url="http://localhost", resource_server_url=None)  # type: ignore[arg-type]


class StaticTokenVerifier:
    """The SDK's TokenVerifier for one shared token, compared in constant time (SHA-256 of both sides
    through `hmac.compare_digest`, so neither content nor length leaks through timing)."""

    def __init__(self, token: str) -> None:
        self._digest = hashlib.sha256(check_token(token, "the server").encode("ascii")).digest()

    def matches(self, candidate: str) -> bool:
        """Whether `candidate` is the token."""
        digest = hashlib.sha256(candidate.encode("utf-8", errors="surrogatepass")).digest()
        return hmac.compare_digest(digest, self._digest)

    async def verify_token(self, token: str) -> Any:
        """An AccessToken for the right token, None otherwise (the SDK then answers 401)."""
        from mcp.server.auth.provider import AccessToken

        if not self.matches(token):
            return None
        return AccessToken(token=token, client_id=CLIENT_ID, scopes=[])
