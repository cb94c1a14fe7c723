"""Console sign-in: the admin token is posted once, then a signed cookie stands in.

The cookie names the token's grant (its place in the configuration) and an expiry,
signed (HMAC-SHA256) with a key derived from every configured token: no state on
the server, so it holds across the workers' admin listeners of one host (cookies
do not tell ports apart) and across replicas with the same tokens, and changing
any token signs everyone out.
The token itself never reaches the browser's storage or a URL. The cookie is
``HttpOnly`` and ``SameSite=Strict``; every form that changes something also
carries a token derived from the cookie (double submit), checked on POST.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from sidecar.admin.api import TokenAuth
from sidecar.admin.grants import Grant

COOKIE = "memory_console"
#: Where the cookie is sent: the console's pages only.
COOKIE_PATH = "/console"


@dataclass(frozen=True, slots=True)
class Session:
    grant: Grant
    #: The cookie's value (what the form token is derived from).
    cookie: str
    expires: int


class ConsoleSessions:
    """Signs and reads console cookies for one :class:`TokenAuth`."""

    def __init__(self, auth: TokenAuth, lifetime_s: int) -> None:
        self._auth = auth
        self._lifetime_s = lifetime_s
        self._key = hashlib.sha256(b"memory-console-v1\x00" + auth.fingerprint()).digest()

    @property
    def lifetime_s(self) -> int:
        return self._lifetime_s

    def sign_in(self, token: str) -> Session | None:
        """A new session for ``token`` (None: not a configured token)."""
        grant = self._auth.authenticate(f"Bearer {token}")
        if grant is None:
            return None
        expires = int(time.time()) + self._lifetime_s
        index = self._auth.grants.index(grant)
        payload = json.dumps(
            {"g": index, "e": expires, "n": secrets.token_hex(8)}, separators=(",", ":")
        ).encode()
        body = base64.urlsafe_b64encode(payload).decode().rstrip("=")
        return Session(grant, f"{body}.{self._sign(body)}", expires)

    def read(self, cookie: str | None) -> Session | None:
        """The session of ``cookie`` (None: missing, forged, expired or its token gone)."""
        body, _, signature = (cookie or "").partition(".")
        if not body or not _same(signature, self._sign(body)):
            return None
        try:
            payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            index, expires = int(payload["g"]), int(payload["e"])
        except (ValueError, KeyError, TypeError):
            return None
        grants = self._auth.grants
        if not 0 <= index < len(grants) or expires < time.time():
            return None
        return Session(grants[index], cookie or "", expires)

    def form_token(self, session: Session) -> str:
        """The token forms of this session carry (checked by :meth:`form_ok`)."""
        return self._sign("form\x00" + session.cookie)

    def form_ok(self, session: Session, presented: str | None) -> bool:
        return _same(self.form_token(session), presented or "")

    def _sign(self, text: str) -> str:
        digest = hmac.new(self._key, _bytes(text), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _bytes(text: str) -> bytes:
    """``text`` as UTF-8, lone surrogates included (a crafted cookie may hold any)."""
    return text.encode("utf-8", errors="surrogatepass")


def _same(presented: str, expected: str) -> bool:
    """Constant-time comparison of bytes: ``hmac.compare_digest`` raises on a ``str``
    with characters outside ASCII, and a crafted cookie or form token is simply
    not signed, never an error."""
    return hmac.compare_digest(_bytes(presented), _bytes(expected))
