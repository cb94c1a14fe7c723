"""HTML building blocks of the console: every value is escaped unless it is
:class:`Markup` already, so memory text (any user's words) never becomes markup."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from urllib.parse import quote, urlencode


class Markup(str):
    """Text that is HTML already (built here from escaped parts)."""

    __slots__ = ()


def esc(value: object) -> Markup:
    """``value`` as HTML text (Markup passes through)."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def join(parts: Iterable[object], sep: str = "") -> Markup:
    return Markup(sep.join(esc(part) for part in parts))


def tag(element: str, /, *children: object, **attrs: object) -> Markup:
    """``<element attrs>children</element>``; attribute ``class_`` is ``class``; a True
    attribute is written bare, False/None ones are left out."""
    rendered = []
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        attr = key.rstrip("_").replace("_", "-")
        rendered.append(f" {attr}" if value is True else f' {attr}="{esc(value)}"')
    opening = f"<{element}{''.join(rendered)}>"
    if element in ("input", "meta", "link", "br"):
        return Markup(opening)
    return Markup(f"{opening}{join(children)}</{element}>")


def path(*segments: str, query: Mapping[str, object] | None = None) -> str:
    """``/console/<segments…>`` with each segment URL-encoded, and a query string
    of the non-empty values."""
    url = "/console/" + "/".join(quote(segment, safe="") for segment in segments)
    pairs = {k: str(v) for k, v in (query or {}).items() if v not in (None, "", 0)}
    return f"{url}?{urlencode(pairs)}" if pairs else url


def when(ms: int) -> Markup:
    """A time in ms since the epoch as UTC, in a ``<time>`` element."""
    if not ms:
        return esc("—")
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return tag("time", moment.strftime("%Y-%m-%d %H:%M UTC"), datetime=moment.isoformat())


def status_tag(status: str) -> Markup:
    return tag("span", status, class_=f"tag {status}")


def hidden(name: str, value: str) -> Markup:
    return tag("input", type="hidden", name=name, value=value)


def table(headers: Iterable[str], rows: Iterable[Iterable[object]], caption: str) -> Markup:
    head = tag("tr", *(tag("th", h, scope="col") for h in headers))
    body = [tag("tr", *(cell if _is_cell(cell) else tag("td", cell) for cell in r)) for r in rows]
    return tag(
        "table", tag("caption", caption, class_="skip"), tag("thead", head), tag("tbody", *body)
    )


def _is_cell(value: object) -> bool:
    return isinstance(value, Markup) and value.startswith(("<td", "<th"))


def page(
    title: str,
    body: object,
    *,
    signed_in: str | None = None,
    form_token: str = "",
) -> str:
    """A whole page: header (who is signed in, sign out), then ``body``."""
    if signed_in is not None:
        who = tag(
            "span",
            "Signed in: ",
            tag("strong", signed_in),
        )
        sign_out = tag(
            "form",
            hidden("form_token", form_token),
            tag("button", "Sign out", type="submit", class_="secondary"),
            method="post",
            action=path("logout"),
        )
        right = join([who, sign_out])
        links = tag("nav", tag("a", "Users", href=path()), aria_label="Console")
    else:
        right = links = esc("")
    header = tag(
        "header",
        tag("a", "Skip to content", href="#main", class_="skip"),
        tag("strong", tag("a", "Memory console", href=path())),
        links,
        tag("span", "", class_="grow"),
        right,
        class_="top",
    )
    document = join(
        [
            Markup("<!doctype html>"),
            tag(
                "html",
                tag(
                    "head",
                    tag("meta", charset="utf-8"),
                    tag("meta", name="viewport", content="width=device-width, initial-scale=1"),
                    tag("meta", name="referrer", content="no-referrer"),
                    tag("title", f"{title} · memory console"),
                    tag("link", rel="stylesheet", href=path("static", "console.css")),
                ),
                tag("body", header, tag("main", body, id="main")),
                lang="en",
            ),
        ]
    )
    return str(document)
