"""``sidecar memories`` through a running sidecar's admin API.

A running sidecar holds its store (milvus-lite allows one process per file) and its
write journal, so the CLI cannot open them beside it; it asks the sidecar instead,
over the admin listener the same config names (``admin.host``/``admin.port``, the
``admin.token`` or ``SIDECAR_ADMIN_TOKEN``). Every action maps to the HTTP admin
API's operation, whose answers are the JSON the CLI prints when it opens the store
itself (``export`` returns the JSON lines). The standard library's HTTP client only:
a CLI call is one request.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from sidecar.config import SidecarConfig
from sidecar.errors import SidecarError

#: How long the probe waits for a running sidecar's admin listener.
PROBE_TIMEOUT_S = 1.0
#: How long one admin call may take (a forget or an import of many rows).
CALL_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class RunningSidecar:
    """A sidecar answering on the config's admin listener."""

    url: str
    token: str | None

    def call(self, args: argparse.Namespace) -> Any:
        """``args.action`` as an admin API call; its JSON answer (lines for export)."""
        method, path, query, body = _operation(args)
        if self.token is None:
            raise SidecarError(
                "a running sidecar holds the store; set admin.token (or "
                "SIDECAR_ADMIN_TOKEN) to manage memories through its admin API"
            )
        url = f"{self.url}/v1/admin/users/{urllib.parse.quote(args.user, safe='')}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            if isinstance(body, bytes):
                data, headers["Content-Type"] = body, "application/x-ndjson"
            else:
                data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as response:
                raw = response.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:2000]
            raise SidecarError(f"the running sidecar answered HTTP {exc.code}: {detail}") from exc
        except OSError as exc:
            raise SidecarError(f"the running sidecar at {self.url} failed: {exc}") from exc
        if args.action == "export":
            return raw.splitlines(keepends=True)
        return json.loads(raw)


def running_sidecar(config: SidecarConfig) -> RunningSidecar | None:
    """The sidecar serving this config's admin listener, when one answers."""
    admin = config.admin
    if not admin.enabled or admin.port == 0:
        return None
    host = "127.0.0.1" if admin.host in ("0.0.0.0", "::", "") else admin.host
    url = f"http://{host}:{admin.port}"
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=PROBE_TIMEOUT_S) as response:
            if response.status != 200:
                return None
    except (OSError, ValueError):
        return None
    token = admin.token.get_secret_value() if admin.token is not None else None
    return RunningSidecar(url, token)


def _operation(
    args: argparse.Namespace,
) -> tuple[str, str, dict[str, Any], dict[str, Any] | bytes | None]:
    """(method, path under the user, query, body) of ``args.action``."""
    action = args.action
    request = getattr(args, "request", None)
    fields = request.model_dump(exclude_none=True, mode="json") if request is not None else {}
    memory = f"/memories/{urllib.parse.quote(getattr(args, 'id', '') or '', safe='')}"
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
