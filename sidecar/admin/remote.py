"""``sidecar memories`` through a running sidecar's admin API.

A running sidecar holds its store (milvus-lite allows one process per file) and its
write journal, so the CLI cannot open them beside it; it asks the sidecar instead.
The admin token is a key to every user's memories, so it goes only over a channel
nothing else can answer on:

- the sidecar's admin **Unix socket** (``admin.socket``, by default ``admin.sock``
  beside the write journal), trusted only when it and its directory belong to this
  user (or root) and no one else can write the directory — so no other local
  process could have put it there;
- or an explicit ``--remote URL``, the operator's deliberate choice.

A plain TCP probe of the admin port (``/healthz``, no token) only tells the user that
a sidecar answers there without its socket; the token is never sent to whatever
answered a probe. Every action maps to the HTTP admin API's operation, whose
answers are the JSON the CLI prints when it opens the store itself (``export``
returns the JSON lines). The standard library's HTTP client only: a CLI call is one
request.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket as socketlib
import stat
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.config import SidecarConfig
from sidecar.errors import SidecarError

#: How long the probe waits for a running sidecar's admin listener.
PROBE_TIMEOUT_S = 1.0
#: How long one admin call may take (a forget or an import of many rows).
CALL_TIMEOUT_S = 300.0


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self._path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True, slots=True)
class RunningSidecar:
    """A sidecar's admin API over a channel that cannot be impersonated: its Unix
    socket, or a URL the operator named."""

    #: Where, for messages: ``unix:/path`` or the URL.
    where: str
    token: str | None
    socket: Path | None = None
    url: str = ""

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.socket is not None:
            return _UnixConnection(self.socket, timeout)
        parts = urllib.parse.urlsplit(self.url)
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        return kind(parts.netloc, timeout=timeout)

    def _base_path(self) -> str:
        return urllib.parse.urlsplit(self.url).path.rstrip("/") if self.url else ""

    def answers(self) -> bool:
        """Whether the sidecar answers its health check (no token sent)."""
        connection = self._connection(PROBE_TIMEOUT_S)
        try:
            connection.request("GET", f"{self._base_path()}/healthz")
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def call(self, args: argparse.Namespace) -> Any:
        """``args.action`` as an admin API call; its JSON answer (lines for export)."""
        method, path, query, body = _operation(args)
        if self.token is None:
            raise SidecarError(
                "a running sidecar holds the store; set admin.token (or "
                "SIDECAR_ADMIN_TOKEN) to manage memories through its admin API"
            )
        user = getattr(args, "user", None)  # None: the list of users
        owner = "" if user is None else "/" + urllib.parse.quote(user, safe="")
        target = f"{self._base_path()}/v1/admin/users{owner}{path}"
        if query:
            target += "?" + urllib.parse.urlencode(query)
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            if isinstance(body, bytes):
                data, headers["Content-Type"] = body, "application/x-ndjson"
            else:
                data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        connection = self._connection(CALL_TIMEOUT_S)
        try:
            connection.request(method, target, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            raise SidecarError(f"the running sidecar at {self.where} failed: {exc}") from exc
        finally:
            connection.close()
        if response.status >= 400:
            raise SidecarError(f"the running sidecar answered HTTP {response.status}: {raw[:2000]}")
        if args.action == "export":
            return raw.splitlines(keepends=True)
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SidecarError(f"the running sidecar at {self.where} answered no JSON") from exc


def untrusted(path: Path) -> str | None:
    """Why the socket at ``path`` could have been put there by someone else (None:
    it could not: it and its directory are this user's or root's, and no one else
    may write the directory)."""
    mine = (os.geteuid(), 0)
    info = path.lstat()
    if not stat.S_ISSOCK(info.st_mode):
        return f"{path} is not a socket"
    if info.st_uid not in mine:
        return f"{path} belongs to another user (uid {info.st_uid})"
    folder = path.parent.stat()
    if folder.st_uid not in mine:
        return f"its directory belongs to another user (uid {folder.st_uid})"
    if folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "its directory may be written by other users"
    return None


def running_sidecar(config: SidecarConfig, remote: str | None = None) -> RunningSidecar | None:
    """The sidecar to send this config's admin token to: the ``remote`` URL when
    given, else the one serving this config's admin socket; None when none runs
    (the CLI then opens the store itself). A sidecar that answers only on its TCP
    port, or a socket that anyone else could have made, is an error: the token is
    not sent there."""
    admin = config.admin
    token = admin.token.get_secret_value() if admin.token is not None else None
    if remote is not None:
        parts = urllib.parse.urlsplit(remote)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SidecarError(f"--remote must be an http(s)://host:port URL, not {remote!r}")
        return RunningSidecar(remote, token, url=remote)
    socket = admin.socket_path(config.write_queue.journal_path) if admin.enabled else None
    if socket is not None and socket.exists():
        reason = untrusted(socket)
        if reason is not None:
            raise SidecarError(
                f"not sending the admin token to {socket}: {reason}; fix its permissions "
                "or use --remote URL"
            )
        found = RunningSidecar(f"unix:{socket}", token, socket=socket)
        if found.answers():
            return found
    listener = _tcp_listener(config)
    if listener is not None:
        raise SidecarError(
            f"something answers on {listener} but not on the admin socket "
            f"({socket or 'admin.socket is off'}): the admin token is not sent to an "
            "unverified listener; use --remote URL to send it there deliberately"
        )
    return None


def _tcp_listener(config: SidecarConfig) -> str | None:
    """The admin listener's URL when something answers its health check there (no
    token is sent)."""
    admin = config.admin
    if not admin.enabled or admin.port == 0:
        return None
    host = "127.0.0.1" if admin.host in ("0.0.0.0", "::", "") else admin.host
    url = f"http://{host}:{admin.port}"
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=PROBE_TIMEOUT_S) as response:
            return url if response.status == 200 else None
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _operation(
    args: argparse.Namespace,
) -> tuple[str, str, dict[str, Any], dict[str, Any] | bytes | None]:
    """(method, path under the user — under ``/users`` for ``users`` —, query, body)
    of ``args.action``."""
    action = args.action
    request = getattr(args, "request", None)
    fields = request.model_dump(exclude_none=True, mode="json") if request is not None else {}
    memory = f"/memories/{urllib.parse.quote(getattr(args, 'id', '') or '', safe='')}"
    if action == "users":
        return "GET", "", fields, None
    if action == "list":
        return "GET", "/memories", fields, None
    if action == "search":
        return "GET", "/search", fields, None
    if action == "add":
        return "POST", "/memories", {}, fields
    if action == "get":
        return "GET", memory, {}, None
    if action == "update":
        return "PATCH", memory, {}, fields
    if action == "delete":
        return "DELETE", memory, {}, None
    if action == "history":
        return "GET", f"{memory}/history", {}, None
    if action == "consolidate":
        return "POST", "/consolidate", {}, None
    if action == "forget":
        return "DELETE", "", {}, None
    if action == "export":
        return "GET", "/export", {"embeddings": "true"} if args.embeddings else {}, None
    if action == "import":
        query = {"reembed": "true"} if args.reembed else {}
        return "POST", "/import", query, "\n".join(args.lines).encode("utf-8")
    raise SidecarError(f"unknown action {action!r}")
