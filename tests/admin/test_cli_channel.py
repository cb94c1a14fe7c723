"""``sidecar memories`` sends the admin token only over a channel nothing else can
answer on: the running sidecar's admin Unix socket (its and its directory's owner
checked) or an explicit ``--remote`` URL — never to whatever answered a probe of the
admin port."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.admin.remote import untrusted
from sidecar.cli import main
from sidecar.runtime.server import Sidecar
from tests.admin.conftest import ADMIN
from tests.admin.test_api import add, new_user

TOKEN = "cli-channel-token-0123456789"


class Impostor(ThreadingHTTPServer):
    """An HTTP server that answers ``/healthz`` like a sidecar and keeps every
    Authorization header it is sent."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        impostor = self

        class Handler(BaseHTTPRequestHandler):
            def do_any(self) -> None:
                impostor.seen.append(self.headers.get("Authorization") or "")
                body = b'{"status": "ok", "items": [], "total": 0}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_DELETE = do_any

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def impostor() -> Iterator[Impostor]:
    server = Impostor()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def write_config(tmp_path: Path, **admin: Any) -> Path:
    path = tmp_path / "sidecar.yaml"
    document = {
        "store": {"uri": str(tmp_path / "memory.db")},
        "write_queue": {"journal_path": str(tmp_path / "data" / "journal.sqlite3")},
        "admin": {"token": TOKEN, **admin},
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


async def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, ["memories", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.usefixtures("restore_logging")
async def test_a_process_on_the_admin_port_never_receives_the_token(
    tmp_path: Path, impostor: Impostor, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the sidecar down, anything bound to its admin port answers the probe; the
    CLI says so and sends it nothing with a token."""
    config = write_config(tmp_path, port=impostor.server_address[1])
    code, out, err = await cli(capsys, "list", "--config", str(config), "--user", "alice")
    assert code == 1
    assert out == ""
    assert "not sent to an unverified listener" in err
    assert "--remote" in err
    assert all(TOKEN not in header for header in impostor.seen)


@pytest.mark.usefixtures("restore_logging")
async def test_a_socket_someone_else_could_have_made_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # any local user could have put a socket here
    path = shared / "admin.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    try:
        assert untrusted(path) == "its directory may be written by other users"
        config = write_config(tmp_path, socket=str(path), port=0)
        code, _, err = await cli(capsys, "list", "--config", str(config), "--user", "alice")
        assert code == 1
        assert "not sending the admin token" in err
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):
            listener.accept()  # the CLI never connected
    finally:
        listener.close()


def test_a_socket_of_this_user_in_a_private_directory_is_trusted(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    path = private / "admin.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        assert untrusted(path) is None
    plain = private / "not-a-socket"
    plain.write_text("")
    assert untrusted(plain) == f"{plain} is not a socket"


@pytest.mark.usefixtures("restore_logging")
async def test_the_running_sidecar_is_reached_over_its_admin_socket(
    sidecar: Sidecar, http: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The package's sidecar serves ``admin.sock`` beside its journal, mode 0600; the
    CLI on the same config goes through it."""
    config = sidecar.components.config
    path = config.admin.socket_path(config.write_queue.journal_path)
    assert path is not None
    assert path.is_socket()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    user = new_user()
    await add(http, user, "User keeps bees on the roof.")
    document = {
        "store": {"uri": config.store.uri},
        "write_queue": {"journal_path": config.write_queue.journal_path},
        "admin": {"token": ADMIN, "port": 0},
    }
    file = tmp_path / "same.yaml"
    file.write_text(yaml.safe_dump(document), encoding="utf-8")
    code, out, err = await cli(capsys, "list", "--config", str(file), "--user", user)
    assert code == 0, err
    assert f"through the running sidecar at unix:{path}" in err
    assert [m["content"] for m in json.loads(out)["items"]] == ["User keeps bees on the roof."]


@pytest.mark.usefixtures("restore_logging")
async def test_remote_names_the_listener_deliberately(
    sidecar: Sidecar, http: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    user = new_user()
    await add(http, user, "User plays the cello.")
    config = write_config(tmp_path, token=ADMIN, socket="")
    url = f"http://127.0.0.1:{sidecar.admin_port}"
    code, out, err = await cli(
        capsys, "list", "--config", str(config), "--user", user, "--remote", url
    )
    assert code == 0, err
    assert f"at {url}" in err
    assert [m["content"] for m in json.loads(out)["items"]] == ["User plays the cello."]
    code, _, err = await cli(
        capsys, "list", "--config", str(config), "--user", user, "--remote", "ftp://x"
    )
    assert code == 1
    assert "--remote must be" in err


async def test_a_socket_that_cannot_be_made_never_stops_the_admin_listener(
    tmp_path: Path,
) -> None:
    """A directory that cannot be made (here a file in its way; in a container, a
    read-only root file system): the TCP listener serves, the socket is not there."""
    from aiohttp import web

    from sidecar.admin.http import AdminServer
    from sidecar.config import AdminConfig

    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    server = AdminServer(AdminConfig(port=0), web.Application(), blocker / "admin.sock")
    try:
        await server.start()
        assert server.port > 0
        assert server.socket is None
    finally:
        await server.stop()
