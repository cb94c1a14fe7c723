"""The sidecar's own listeners and logs: ``server`` (gRPC ext_proc), ``admin``
(HTTP metrics, health and the memory admin API) and ``logging``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from sidecar.config.base import Port, _header_name, _Model
from sidecar.config.experimental import ServerExperiments


class ServerConfig(ServerExperiments):
    """The gRPC ext_proc listener."""

    #: Address the gRPC listener binds (``0.0.0.0``: every interface).
    host: str = "127.0.0.1"
    #: gRPC port (0: any free port, printed at start-up).
    port: Port = 50051
    #: Largest gRPC message accepted or sent. Envoy's buffered bodies arrive in one
    #: message, so this must exceed the largest body you let Envoy buffer.
    max_message_bytes: int = Field(default=16 * 1024 * 1024, ge=1024 * 1024)
    #: Seconds in-flight streams get to finish after SIGTERM.
    shutdown_grace_s: float = Field(default=10.0, ge=0)
    #: gRPC metadata key (set per route by Envoy) naming the profile to apply. Without
    #: it (gateways that cannot set it per route), the profile whose ``paths`` or
    #: ``responses_paths`` list the request's path, else ``default_profile``.
    profile_metadata_key: str = "x-memory-profile"
    #: Allow several processes to share the port (SO_REUSEPORT). Off: a stale second
    #: sidecar must not silently take traffic.
    reuse_port: bool = False
    #: Sidecar processes on this host. One process is held back by its interpreter
    #: lock well before the cores are busy; with N > 1, ``serve`` supervises N
    #: complete sidecars: worker i on ``port + i`` (admin on ``admin.port + i``),
    #: journals ``<journal>.w<i>``, one embedded store server for a milvus-lite file,
    #: each a replica (others' writes visible within ``cache.ttl_s``). The generated
    #: Envoy config balances over all of them. Needs a fixed ``port``.
    workers: int = Field(default=1, ge=1, le=64)
    #: Seconds between samples of the event loop's lag
    #: (``memory_sidecar_event_loop_lag_seconds``: how late a timer ran, i.e. how
    #: long something held the loop every request shares); 0: not measured.
    loop_lag_interval_s: float = Field(default=0.1, ge=0, le=60)

    _check_key = field_validator("profile_metadata_key")(_header_name)


#: Shortest admin token accepted: a guessable token guards every user's memories.
MIN_ADMIN_TOKEN_CHARS = 16


def _check_admin_token(value: SecretStr | None) -> SecretStr | None:
    if value is not None and len(value.get_secret_value()) < MIN_ADMIN_TOKEN_CHARS:
        raise ValueError(f"an admin token needs at least {MIN_ADMIN_TOKEN_CHARS} characters")
    return value


class AdminToken(_Model):
    """One scoped admin token (``admin.tokens``)."""

    #: The bearer token (at least 16 characters; compared in constant time).
    token: SecretStr
    #: The users this token may manage: ``"*"`` (all) or a list of exact ids and
    #: shell-style patterns (``tenant-a-*``). Any other user is a 403.
    users: Literal["*"] | tuple[str, ...] = "*"
    #: Groups this token may share its users' memories with (``visibility: group``
    #: with one of these ``group_id``s). Sharing puts text into other users'
    #: prompts, so a token that is not for all users may otherwise write only
    #: private memories (``visibility: user``), and never ``public`` ones.
    share_groups: tuple[str, ...] = ()
    #: A label for logs and metrics (never the token).
    name: str = Field(default="", max_length=64)

    _check_token = field_validator("token")(_check_admin_token)

    @field_validator("share_groups")
    @classmethod
    def _groups(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for group in value:
            if not group or group != group.strip() or not group.isprintable():
                raise ValueError(f"share_groups: {group!r} is not a group id")
        return value


class AdminConfig(_Model):
    """The HTTP admin listener: metrics and health (always open) and the memory admin
    API under ``/v1/admin/`` (bearer tokens; disabled when none is configured)."""

    #: Serve the admin listener at all.
    enabled: bool = True
    #: Address the admin listener binds. It serves the memory API too: keep it
    #: on a private interface.
    host: str = "127.0.0.1"
    #: Admin HTTP port (0: any free port).
    port: Port = 9464
    #: Bearer token for the admin API, scope ``"*"`` (every user). Metrics and
    #: health stay open.
    token: SecretStr | None = None
    #: Further tokens, each limited to some users.
    tokens: tuple[AdminToken, ...] = ()
    #: Serve the memory console (web pages under ``/console/``) beside the API, with
    #: the same tokens and scopes.
    console: bool = True
    #: Seconds a console sign-in lasts (a signed, HTTP-only cookie; the token itself
    #: is never stored in the browser).
    console_session_s: int = Field(default=8 * 3600, ge=60, le=7 * 24 * 3600)
    #: Most users whose injections are kept explained (profiles with
    #: ``injection.explain_last``); the least recently injected go first. An entry is
    #: about 1 KB: memory is bounded by this × ``explain_last``.
    explain_max_users: int = Field(default=1_000, ge=1, le=1_000_000)

    #: A Unix socket the admin listener also serves, for ``sidecar memories`` on this
    #: host. It is made mode 0600 in a directory only this user writes, so no other
    #: process can answer in the sidecar's place and receive the admin token (the
    #: CLI sends it only there, or to an explicit ``--remote`` URL). ``None``:
    #: ``admin.sock`` beside the write journal; ``""``: none.
    socket: str | None = None

    _check_token = field_validator("token")(_check_admin_token)

    def socket_path(self, journal_path: str) -> Path | None:
        """Where the admin socket is (None: no socket)."""
        if self.socket == "":
            return None
        if self.socket is not None:
            return Path(self.socket).expanduser()
        return Path(journal_path).expanduser().parent / "admin.sock"

    @property
    def api_enabled(self) -> bool:
        """The memory API is served only when some token is configured."""
        return self.token is not None or bool(self.tokens)


class LoggingConfig(_Model):
    #: Root log level.
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    #: One JSON object per line (``ts``, ``level``, ``logger``, ``msg``, and
    #: ``request_id`` while a request is handled); ``false``: plain text.
    json_format: bool = Field(default=True, alias="json")
    #: Log memory text and prompts. Off by default: logs carry no private content.
    debug_content: bool = False
