"""Console sign-in cookies and the page builder, without a server: a cookie is
signed for one grant and expires; a changed token or scope, a forged body or
signature, or another deployment's cookie are refused; form tokens belong to one
session; every value written into a page is escaped."""

from __future__ import annotations

import time

import pytest

from sidecar.admin.api import TokenAuth
from sidecar.admin.console.html import Markup, esc, path, tag
from sidecar.admin.console.session import ConsoleSessions
from sidecar.config import AdminConfig

ADMIN = "admin-token-0123456789abcdef"
TEAM = "team-token-0123456789abcdefgh"


def auth(admin: str = ADMIN, team_users: tuple[str, ...] = ("team-*",)) -> TokenAuth:
    config = AdminConfig.model_validate(
        {"token": admin, "tokens": [{"token": TEAM, "users": list(team_users), "name": "team"}]}
    )
    return TokenAuth(config)


def test_a_token_signs_in_to_its_own_grant() -> None:
    sessions = ConsoleSessions(auth(), 3600)
    assert sessions.sign_in("nope") is None
    admin, team = sessions.sign_in(ADMIN), sessions.sign_in(TEAM)
    assert admin is not None
    assert team is not None
    assert ADMIN not in admin.cookie
    assert TEAM not in team.cookie
    read = sessions.read(team.cookie)
    assert read is not None
    assert read.grant.name == "team"
    assert read.grant.allows("team-a")
    assert not read.grant.allows("bob")
    assert sessions.read(admin.cookie).grant.all_users  # type: ignore[union-attr]


def test_forged_expired_and_foreign_cookies_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = ConsoleSessions(auth(), 3600)
    team = sessions.sign_in(TEAM)
    assert team is not None
    body, _, signature = team.cookie.partition(".")
    for forged in ("", "x", body, f"{body}.", f"{body}x.{signature}", f"{body}.{signature}x"):
        assert sessions.read(forged) is None, forged
    # Another token (or scope) configured: every session signed before is void.
    assert (
        ConsoleSessions(auth(admin="another-admin-token-0123456789"), 3600).read(team.cookie)
        is None
    )
    assert ConsoleSessions(auth(team_users=("*",)), 3600).read(team.cookie) is None
    # Expiry.
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 3601)
    assert sessions.read(team.cookie) is None


def test_form_tokens_belong_to_one_session() -> None:
    sessions = ConsoleSessions(auth(), 3600)
    one, two = sessions.sign_in(TEAM), sessions.sign_in(TEAM)
    assert one is not None
    assert two is not None
    assert sessions.form_ok(one, sessions.form_token(one))
    assert not sessions.form_ok(one, sessions.form_token(two))
    assert not sessions.form_ok(one, None)
    assert not sessions.form_ok(one, "")


def test_everything_written_into_a_page_is_escaped() -> None:
    text = "<script>alert('x')</script> & \"quotes\""
    built = tag("td", text, title=text, class_="c")
    assert "<script>" not in built
    assert built.startswith('<td title="&lt;script&gt;')
    assert 'class="c"' in built
    assert esc(Markup("<b>kept</b>")) == "<b>kept</b>"
    assert tag("input", name="q", required=True, disabled=False) == '<input name="q" required>'
    assert (
        path("users", "a/b c", query={"q": "x&y", "offset": 0})
        == "/console/users/a%2Fb%20c?q=x%26y"
    )
