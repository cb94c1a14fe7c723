"""What ``sidecar envoy-config`` renders into the Envoy bootstrap (``envoy``)."""

from __future__ import annotations

from pydantic import Field, field_validator

from sidecar.config.base import Port, _Model


class RouteConfig(_Model):
    """One Envoy route (used by ``sidecar envoy-config``).

    Requests whose path starts with ``prefix`` go upstream (with the prefix replaced
    by ``rewrite`` when set) and are processed under ``profile``; ``profile: null``
    disables the ext_proc filter on the route entirely.
    """

    #: Path prefix the route matches.
    prefix: str
    #: Replaces the matched prefix upstream (unset: the path is kept).
    rewrite: str | None = None
    #: The memory profile applied on the route; ``null`` disables the ext_proc
    #: filter there.
    profile: str | None = "default"
    #: Seconds Envoy waits for the upstream (0 = no limit; LLM streams are long).
    timeout_s: float = Field(default=0, ge=0)

    @field_validator("prefix", "rewrite")
    @classmethod
    def _check_prefix(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"must start with '/': {value!r}")
        return value


class JwtConfig(_Model):
    """The identity from a JWT that Envoy verifies (``jwt_authn``) against a local
    JWKS file: its claims become the identity headers the sidecar reads."""

    #: The ``iss`` the tokens must carry.
    issuer: str = Field(min_length=1)
    #: Accepted ``aud`` values (empty: any).
    audiences: tuple[str, ...] = ()
    #: The JWKS file (public keys; ``oct`` keys for HS256) as Envoy sees it.
    jwks_file: str = Field(min_length=1)
    #: The claim that is the user id.
    user_claim: str = "sub"
    #: The claim that lists the user's groups ("" = no groups from the token).
    groups_claim: str = "groups"
    #: A request without a valid token is refused (401). Off: it goes on without an
    #: identity (no memory), a bad token is still refused.
    required: bool = True


class EnvoyConfig(_Model):
    """What ``sidecar envoy-config`` renders into the Envoy bootstrap."""

    #: Address (an IP) of Envoy's client-facing listener.
    listen_host: str = "0.0.0.0"
    #: Envoy's client-facing port.
    listen_port: Port = 10000
    #: Address (an IP) of Envoy's admin interface; keep it private.
    admin_host: str = "127.0.0.1"
    #: Envoy's admin port.
    admin_port: Port = 9901
    #: Where Envoy reaches the sidecar's gRPC listener.
    sidecar_host: str = "127.0.0.1"
    #: The sidecar's gRPC port as Envoy reaches it.
    sidecar_port: Port = 50051
    #: How long Envoy waits for each ext_proc reply before failure_mode_allow applies.
    message_timeout_ms: int = Field(default=2000, ge=10, le=60_000)
    #: Requests still go upstream when the sidecar is down or too slow.
    failure_mode_allow: bool = True
    #: Largest body Envoy buffers (413 above it); keep below server.max_message_bytes.
    buffer_limit_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024)
    #: PEM file of the CA(s) that sign an ``https`` upstream's certificate, as seen
    #: by Envoy. When set, Envoy verifies the certificate chain and that it names
    #: the upstream host (DNS or IP subject alternative name), and sends SNI. Unset:
    #: TLS without verification (the certificate is not checked).
    upstream_ca_file: str | None = Field(default=None, min_length=1)
    #: Remove the identity headers (every profile's ``identity`` user, groups and
    #: session headers) from what the client sent, before any filter reads them: a
    #: client cannot name itself another user. Turn off only behind a trusted proxy
    #: that sets them; ``jwt`` sets them from a verified token after the removal.
    strip_identity_headers: bool = True
    #: Derive the identity from a verified JWT (unset: no token check).
    jwt: JwtConfig | None = None
    #: Envoy's routes; the first matching prefix wins (list longer prefixes first).
    routes: tuple[RouteConfig, ...] = (RouteConfig(prefix="/"),)
