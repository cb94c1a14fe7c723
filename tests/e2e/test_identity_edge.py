"""Identity the edge sets, through the real Envoy: client identity headers are
removed before anything reads them, and ``envoy.jwt`` sets them from a token Envoy
verified (HS256 tokens signed here against a local JWKS file)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.stack import Stack, running_stack

pytestmark = pytest.mark.e2e

SECRET = b"a test signing key, 32 bytes long"
ISSUER = "https://auth.example.test"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(claims: dict[str, Any], secret: bytes = SECRET) -> str:
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "edge"}).encode())
    payload = b64(json.dumps(claims).encode())
    signature = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64(signature)}"


def claims(sub: str | None, **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"iss": ISSUER, "aud": "llm-gateway", "exp": int(time.time()) + 600}
    if sub is not None:
        found["sub"] = sub
    return {**found, **extra}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("edge")
    jwks = workdir / "jwks.json"
    jwks.write_text(
        json.dumps({"keys": [{"kty": "oct", "alg": "HS256", "kid": "edge", "k": b64(SECRET)}]})
    )
    envoy = {
        "strip_identity_headers": True,
        "jwt": {"issuer": ISSUER, "audiences": ["llm-gateway"], "jwks_file": str(jwks)},
    }
    with running_stack(workdir, config_overrides={"envoy": envoy}) as running:
        yield running


def ask(stack: Stack, text: str, headers: dict[str, str]) -> tuple[int, str, str | None]:
    """(status, the echoed prompt, x-memory-injected) of one chat request."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()
    request = urllib.request.Request(
        stack.route_url("/v1") + "/chat/completions",
        data=body,
        method="POST",
        headers={"content-type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
            echo = str(answer["choices"][0]["message"]["content"])
            return response.status, echo, response.headers.get("x-memory-injected")
    except urllib.error.HTTPError as exc:
        return exc.code, "", None


def bearer(value: str) -> dict[str, str]:
    return {"authorization": f"Bearer {value}"}


def test_the_user_is_the_verified_tokens_subject_and_nothing_a_client_claims(
    stack: Stack,
) -> None:
    alice, mallory = f"alice-{uuid.uuid4().hex[:6]}", f"mallory-{uuid.uuid4().hex[:6]}"
    written = stack.turns_written()
    status, _, _ = ask(stack, "I live in Lisbon.", bearer(token(claims(alice))))
    assert status == 200
    assert stack.wait_turns_written(written + 1)
    status, echo, injected = ask(stack, "Where do I live?", bearer(token(claims(alice))))
    assert status == 200
    assert injected is not None
    assert int(injected) >= 1
    assert "Lisbon" in echo
    # Mallory's valid token with Alice's id in the header: the header is removed.
    spoofed = {**bearer(token(claims(mallory))), "x-user-id": alice}
    status, echo, _ = ask(stack, "Where do I live?", spoofed)
    assert status == 200
    assert "Lisbon" not in echo


@pytest.mark.parametrize(
    "headers",
    [
        {"x-user-id": "alice"},  # no token, an identity header alone
        bearer(token(claims("alice", exp=int(time.time()) - 60))),  # expired
        bearer(token(claims("alice"), secret=b"another key entirely, 32 bytes!")),  # wrong key
        bearer(token(claims("alice", iss="https://elsewhere.test"))),  # another issuer
        bearer("not.a.token"),
    ],
    ids=["header-only", "expired", "wrong-key", "wrong-issuer", "garbage"],
)
def test_a_request_without_a_valid_token_is_refused(stack: Stack, headers: dict[str, str]) -> None:
    status, echo, _ = ask(stack, "Where do I live?", headers)
    assert status == 401
    assert echo == ""


def test_a_valid_token_without_the_user_claim_gets_no_memory(stack: Stack) -> None:
    before = stack.sidecar_metric("memory_sidecar_passthrough_total", {"reason": "no_identity"})
    status, echo, injected = ask(
        stack, "Where do I live?", {**bearer(token(claims(None))), "x-user-id": "alice"}
    )
    assert status == 200
    assert "<memory>" not in echo
    assert injected is None
    after = stack.sidecar_metric("memory_sidecar_passthrough_total", {"reason": "no_identity"})
    assert after == before + 1


def test_the_rendered_bootstrap_removes_every_identity_header(stack: Stack) -> None:
    bootstrap = Path(stack.envoy_path).read_text()
    for header in ("x-user-id", "x-user-groups", "x-session-id"):
        assert f"remove: {header}" in bootstrap
