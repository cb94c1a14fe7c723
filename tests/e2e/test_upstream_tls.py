"""``envoy.upstream_ca_file`` through the real Envoy binary: an https upstream whose
certificate chains to the configured CA and names the upstream host is reached; a
certificate from another CA, or one that does not name the host, is refused (503).
Certificates are made with the openssl command for each run."""

from __future__ import annotations

import http.server
import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.stack import BIN_DIR, ManagedProcess, free_port, http_get, wait_until
from sidecar.config import config_from_mapping
from sidecar.envoy_config import render_yaml

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
    pytest.mark.skipif(not (BIN_DIR / "envoy").exists(), reason="needs the Envoy binary"),
]


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str) -> None:
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
        "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip


def make_server_cert(directory: Path, ca: str, san: str) -> None:
    openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=upstream",
        cwd=directory,
    )  # fmt: skip
    (directory / "ext.cnf").write_text(
        f"subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf",
        cwd=directory,
    )  # fmt: skip


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"hello": "over tls"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    make_ca(directory, "right-ca")
    make_ca(directory, "other-ca")
    make_server_cert(directory, "right-ca", "DNS:localhost")  # no IP address SAN
    return directory


@pytest.fixture(scope="module")
def upstream_port(pki: Path) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "server.pem", pki / "server.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_envoy_verifies_the_upstream_certificate(
    pki: Path, upstream_port: int, tmp_path: Path
) -> None:
    cases = {  # upstream host, CA file, status, the Envoy counter that explains a 503
        "trusted": ("localhost", pki / "right-ca.pem", 200, ""),
        "other-ca": ("localhost", pki / "other-ca.pem", 503, "ssl.fail_verify_error"),
        # the certificate names localhost only
        "wrong-name": ("127.0.0.1", pki / "right-ca.pem", 503, "ssl.fail_verify_san"),
        "unverified": ("localhost", None, 200, ""),  # no CA configured: not checked
    }
    envoys: dict[str, tuple[ManagedProcess, int, int]] = {}  # process, listen, admin port
    try:
        for name, (host, ca, _, _) in cases.items():
            listen, admin = free_port(), free_port()
            envoy_section = {
                "listen_host": "127.0.0.1",
                "listen_port": listen,
                "admin_port": admin,
                "routes": [{"prefix": "/", "profile": None}],
            }
            if ca is not None:
                envoy_section["upstream_ca_file"] = str(ca)
            config = config_from_mapping({"envoy": envoy_section}, env={})
            path = tmp_path / f"{name}.yaml"
            text = render_yaml(config, f"https://{host}:{upstream_port}", with_ext_proc=False)
            path.write_text(text, encoding="utf-8")
            process = ManagedProcess(
                f"envoy-{name}",
                [
                    str(BIN_DIR / "envoy"),
                    "-c",
                    str(path),
                    "--disable-hot-restart",
                    "--base-id",
                    str(listen),
                    "--log-level",
                    "warning",
                ],
                tmp_path / f"{name}.log",
            )
            envoys[name] = (process.start(), listen, admin)
        for name, (process, _listen, admin) in envoys.items():

            def ready(process: ManagedProcess = process, admin: int = admin) -> bool:
                process.check_alive()
                return http_get(f"http://127.0.0.1:{admin}/ready")[0] == 200

            wait_until(ready, 60, f"envoy {name}")
        for name, (_, listen, admin) in envoys.items():
            status, body = http_get(f"http://127.0.0.1:{listen}/hello", timeout=10)
            _, _, expected, counter = cases[name]
            assert status == expected, (name, body[:200])
            if expected == 200:
                assert json.loads(body) == {"hello": "over tls"}
            else:  # the handshake failed verification, for the expected reason
                stats = http_get(f"http://127.0.0.1:{admin}/stats?filter=llm_upstream.ssl")[1]
                assert f"cluster.llm_upstream.{counter}: 1" in stats.decode(), (name, stats)
    finally:
        for process, _, _ in envoys.values():
            process.stop()
