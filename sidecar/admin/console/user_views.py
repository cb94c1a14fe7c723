"""The console's start page: the users that own memories, by id, with a search box
over their ids, and a form that opens one by its exact id."""

from __future__ import annotations

from typing import Literal

from sidecar.admin.console.html import Markup, esc, join, path, table, tag, when
from sidecar.admin.users import UserPage

#: A grant's users: every user, or exact ids and patterns.
Users = Literal["*"] | tuple[str, ...]


def home(listing: UserPage | None, users: Users, q: str = "", error: str | None = None) -> Markup:
    """The users page; ``listing`` None: no listing (the search was invalid)."""
    find = tag(
        "form",
        tag(
            "label",
            "Find users by any part of their id",
            tag("input", type="search", name="q", id="u-q", value=q, autofocus=True),
            for_="u-q",
        ),
        tag("button", "Find", type="submit"),
        method="get",
        action=path(),
        class_="filters",
        role="search",
    )
    opener = tag(
        "form",
        tag(
            "label",
            "Open a user by exact id",
            tag("input", type="text", name="user", id="user", required=True),
            for_="user",
        ),
        tag("button", "Open", type="submit", class_="secondary"),
        method="get",
        action=path("open"),
        class_="filters open",
    )
    parts: list[object] = [
        tag("h1", "Users"),
        tag(
            "p",
            "The users that have memories, by id"
            + (" (those this token may see)" if users != "*" else "")
            + ". Each id opens that user's memories.",
            class_="sub",
        ),
        tag("p", error, class_="error", role="alert") if error else esc(""),
        find,
    ]
    if listing is not None:
        parts.append(tag("p", _count(listing, users != "*"), class_="sub", role="status"))
        if listing.items:
            parts.append(_table(listing))
        parts.append(_pager(listing))
    parts.append(opener)
    if users != "*":
        parts.append(_scope(users))
    return join(parts)


def _count(listing: UserPage, scoped: bool) -> str:
    if listing.items:
        first, last = listing.items[0].user, listing.items[-1].user
        shown = f"{len(listing.items)} user{'s' if len(listing.items) != 1 else ''}"
        span = f", {first} to {last}" if len(listing.items) > 1 else ""
        found = f" whose id contains “{listing.q}”" if listing.q else ""
        return f"{shown}{found}{span}" + (", more on the next page." if listing.next_after else ".")
    if listing.q:
        return f"No user id contains “{listing.q}”" + (
            " after this point." if listing.after else "."
        )
    if listing.after:
        return "No more users."
    return "No user this token may see has memories." if scoped else "No user has memories yet."


def _table(listing: UserPage) -> Markup:
    rows = [
        [
            tag("a", tag("code", u.user), href=path("users", u.user)),
            tag("td", str(u.active), class_="num"),
            tag("td", str(u.memories), class_="num"),
            tag("td", when(u.updated_at), class_="when"),
        ]
        for u in listing.items
    ]
    return table(["User", "Active", "All memories", "Last change"], rows, "Users with memories")


def _pager(listing: UserPage) -> Markup:
    links = []
    if listing.after:
        links.append(tag("a", "← First page", href=path(query={"q": listing.q})))
    if listing.next_after:
        query = {"q": listing.q, "after": listing.next_after}
        links.append(tag("a", "Next →", href=path(query=query)))
    return tag("nav", *links, class_="pager", aria_label="Pages")


def _scope(users: tuple[str, ...]) -> Markup:
    """A scoped token's exact ids and patterns."""
    exact = [u for u in users if not any(ch in u for ch in "*?[")]
    patterns = [u for u in users if u not in exact]
    items = [tag("li", tag("a", u, href=path("users", u))) for u in exact]
    items += [tag("li", "users matching ", tag("code", p)) for p in patterns]
    return join([tag("h2", "Your users"), tag("ul", *items)])
