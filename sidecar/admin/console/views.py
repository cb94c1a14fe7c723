"""The console's pages, as HTML bodies (see :func:`~sidecar.admin.console.html.page`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sidecar.admin.console.html import (
    Markup,
    esc,
    hidden,
    join,
    path,
    status_tag,
    table,
    tag,
    when,
)
from sidecar.admin.models import STATUS_FILTERS
from sidecar.admin.service import ForgetReport, History, MemoryPage
from sidecar.memory.records.records import Hit, MemoryRecord, MemoryType, Status, Visibility

#: Longest memory or query text shown in a table cell (the memory's page has it all).
CELL_CHARS = 240


@dataclass(frozen=True, slots=True)
class Filters:
    """The memory list's search box and filters, as the page's query string has them."""

    q: str = ""
    status: str = "active"
    memory_type: str = ""
    category_id: str = ""
    visibility: str = ""
    offset: int = 0

    def query(self, **changes: object) -> dict[str, object]:
        values: dict[str, object] = {
            "q": self.q,
            "status": self.status if self.status != "active" else "",
            "memory_type": self.memory_type,
            "category_id": self.category_id,
            "visibility": self.visibility,
            "offset": self.offset,
        }
        values.update(changes)
        return values


def short(text: str, limit: int = CELL_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _alert(error: str | None) -> Markup:
    """An error paragraph screen readers announce (nothing without an error)."""
    return tag("p", error, class_="error", role="alert") if error else esc("")


def login(error: str | None = None) -> Markup:
    problem = _alert(error)
    form = tag(
        "form",
        tag(
            "label",
            "Admin token",
            tag(
                "input",
                type="password",
                name="token",
                id="token",
                autocomplete="current-password",
                required=True,
                autofocus=True,
            ),
            for_="token",
        ),
        tag("button", "Sign in", type="submit"),
        method="post",
        action=path("login"),
        class_="stack",
    )
    note = tag(
        "p",
        "Use a token from admin.token or admin.tokens. A scoped token shows its users only. "
        "The token is sent once and kept nowhere in the browser.",
        class_="sub",
    )
    return tag("div", tag("h1", "Sign in"), problem, note, form, class_="login")


def user_nav(user: str, here: str) -> Markup:
    links = [
        ("Memories", path("users", user)),
        ("Injections", path("users", user, "injections")),
        ("Export (JSON lines)", path("users", user, "export")),
        ("Forget this user", path("users", user, "forget")),
    ]
    return tag(
        "nav",
        *(
            tag("a", label, href=href, aria_current="page" if label == here else None)
            for label, href in links
        ),
        class_="user",
        aria_label="This user",
    )


def _select(name: str, label: str, options: Sequence[tuple[str, str]], chosen: str) -> Markup:
    return tag(
        "label",
        label,
        tag(
            "select",
            *(
                tag("option", text, value=value, selected=value == chosen)
                for value, text in options
            ),
            name=name,
            id=f"f-{name}",
        ),
        for_=f"f-{name}",
    )


def memories(
    user: str,
    filters: Filters,
    categories: Mapping[str, str],
    listing: MemoryPage | None,
    hits: Sequence[Hit] | None,
    notice: str | None = None,
    *,
    known_user: bool = True,
) -> Markup:
    """A user's memories: the filters, then a page of the listing or the search's
    hits; ``known_user`` False: nothing at all is stored for this id, said so."""
    statuses = [(status, status) for status in STATUS_FILTERS]
    form = tag(
        "form",
        tag(
            "label",
            "Search (the request path's retrieval)",
            tag("input", type="search", name="q", id="f-q", value=filters.q),
            for_="f-q",
        ),
        _select("status", "Status", statuses, filters.status),
        _select(
            "memory_type",
            "Type",
            [("", "any"), *((t.value, t.value) for t in MemoryType)],
            filters.memory_type,
        ),
        _select(
            "category_id",
            "Topic / category",
            [("", "any"), *categories.items()],
            filters.category_id,
        ),
        _select(
            "visibility",
            "Visibility",
            [("", "any"), *((v.value, v.value) for v in Visibility)],
            filters.visibility,
        ),
        tag("button", "Apply", type="submit"),
        method="get",
        action=path("users", user),
        class_="filters",
        role="search",
    )
    parts: list[object] = [
        tag("h1", "Memories of ", tag("code", user)),
        user_nav(user, "Memories"),
    ]
    if notice:
        parts.append(tag("p", notice, class_="notice", role="status"))
    parts.append(form)
    if hits is not None:
        parts.append(tag("p", f"{len(hits)} found for the search.", class_="sub"))
        parts.append(_hit_table(user, hits, categories))
    elif listing is not None:
        shown = f"{listing.offset + 1}–{listing.offset + len(listing.items)}"
        count = f"{shown} of {listing.total}" if listing.items else "No memories match."
        if not known_user:
            count = (
                "Nothing is stored for this user id. Ids are exact: check its spelling "
                "and any suffix (the demo's users are like alice-9f7e67)."
            )
        parts.append(tag("p", count, class_="sub", role="status"))
        parts.append(_memory_table(user, listing.items, categories))
        parts.append(_pager(user, filters, listing))
    return join(parts)


def _memory_link(user: str, record: MemoryRecord) -> Markup:
    return tag(
        "a", short(record.content) or "(empty)", href=path("users", user, "memories", record.id)
    )


def _category(categories: Mapping[str, str], record: MemoryRecord) -> str:
    return categories.get(record.category_id, "") if record.category_id else ""


def _memory_table(
    user: str, records: Sequence[MemoryRecord], categories: Mapping[str, str]
) -> Markup:
    rows = [
        [
            _memory_link(user, r),
            str(r.memory_type),
            status_tag(str(r.status)),
            _category(categories, r),
            str(r.visibility),
            tag("td", f"{r.confidence:.2f}", class_="num"),
            tag("td", when(r.created_at), class_="when"),
        ]
        for r in records
    ]
    headers = ["Memory", "Type", "Status", "Category", "Visibility", "Confidence", "Created"]
    return table(headers, rows, "The user's memories")


def _hit_table(user: str, hits: Sequence[Hit], categories: Mapping[str, str]) -> Markup:
    rows = [
        [
            tag("td", f"{h.score:.3f}", class_="num"),
            _memory_link(user, h.record),
            h.via,
            _category(categories, h.record),
            status_tag(str(h.record.status)),
            tag("td", when(h.record.created_at), class_="when"),
        ]
        for h in hits
    ]
    return table(
        ["Score", "Memory", "Found by", "Category", "Status", "Created"], rows, "Search results"
    )


def _pager(user: str, filters: Filters, listing: MemoryPage) -> Markup:
    links = []
    if listing.offset > 0:
        earlier = max(0, listing.offset - listing.limit)
        links.append(
            tag("a", "← Previous", href=path("users", user, query=filters.query(offset=earlier)))
        )
    if listing.next_offset is not None:
        links.append(
            tag(
                "a",
                "Next →",
                href=path("users", user, query=filters.query(offset=listing.next_offset)),
            )
        )
    return tag("nav", *links, class_="pager", aria_label="Pages")


def _accessed(record: MemoryRecord) -> Markup:
    """How often and when a memory was last injected: "never", "once, last <time>",
    "3 times, last <time>" (the time stays markup, the count plain text)."""
    count = record.access_count
    if count <= 0 or record.accessed_at <= 0:
        return join(["never"])
    times = "once" if count == 1 else f"{count} times"
    return join([f"{times}, last ", when(record.accessed_at)])


def memory(
    user: str,
    history: History,
    categories: Mapping[str, str],
    related: Sequence[MemoryRecord],
    form_token: str,
) -> Markup:
    record = history.memory
    facts: list[tuple[str, object]] = [
        ("Status", status_tag(str(record.status))),
        ("Type", str(record.memory_type)),
        ("Category", _category(categories, record) or "—"),
        ("L0 (abstract)", record.abstract or "—"),
        ("L1 (overview)", record.overview or "—"),
        (
            "Visibility",
            f"{record.visibility}" + (f" ({record.group_id})" if record.group_id else ""),
        ),
        ("Confidence", f"{record.confidence:.2f}"),
        ("Importance (salience)", f"{record.importance:.2f}"),
        ("Accessed", _accessed(record)),
        ("Created", when(record.created_at)),
        ("Updated", when(record.updated_at)),
        ("Came from", _origin(record)),
        ("Said", _said(record)),
        ("In their words", tag("blockquote", record.excerpt) if record.excerpt else "—"),
        ("Id", tag("code", record.id)),
    ]
    details = tag("dl", *(join([tag("dt", k), tag("dd", v)]) for k, v in facts), class_="facts")
    chain = [
        tag(
            "li",
            status_tag(str(step.status)),
            " ",
            step.content
            if step.id == record.id
            else tag(
                "a", step.content or "(deleted)", href=path("users", user, "memories", step.id)
            ),
            " · ",
            when(step.created_at),
            _step_note(step),
            class_="here" if step.id == record.id else None,
            aria_current="true" if step.id == record.id else None,
        )
        for step in history.chain
    ]
    links = [tag("li", _memory_link(user, other)) for other in related]
    delete = tag(
        "form",
        hidden("form_token", form_token),
        tag("button", "Delete this memory", type="submit", class_="danger"),
        method="post",
        action=path("users", user, "memories", record.id, "delete"),
    )
    return join(
        [
            tag("p", tag("a", "← Memories of ", user, href=path("users", user))),
            tag("h1", "Memory"),
            tag("p", record.content, class_="content"),
            details,
            tag("h2", "History"),
            tag("ol", *chain, class_="history")
            if len(chain) > 1
            else tag("p", "Added once; never changed.", class_="sub"),
            tag("h2", "Linked memories"),
            tag("ul", *links) if links else tag("p", "None.", class_="sub"),
            tag("h2", "Delete"),
            delete if record.status != Status.DELETED else tag("p", "Deleted.", class_="sub"),
        ]
    )


def _origin(record: MemoryRecord) -> str:
    parts = [record.source or "unknown"]
    if record.session_id:
        parts.append(f"session {record.session_id}")
    return ", ".join(parts)


def _said(record: MemoryRecord) -> Markup:
    """The turns a memory was made from: "on <time> in session s1, message 3 (turn
    req-1; refs a, b)", one per line, oldest first."""
    if not record.origins:
        return join(["—"])
    items = []
    for origin in record.origins:
        where = [f" in session {origin.session}"] if origin.session else []
        if origin.message >= 0:
            where.append(f", message {origin.message}")
        refs = f"; refs {', '.join(origin.refs)}" if origin.refs else ""
        items.append(
            tag(
                "li",
                "on ",
                when(origin.at) if origin.at > 0 else "an unknown date",
                *where,
                " (turn ",
                tag("code", origin.turn),
                refs,
                ")",
            )
        )
    return tag("ul", *items, class_="origins")


def _step_note(step: MemoryRecord) -> Markup:
    if step.status == Status.SUPERSEDED:
        return esc(" → superseded by the next")
    if step.status == Status.MERGED:
        return esc(" → merged into another memory as the same fact")
    return esc("")


def forget_confirm(user: str, form_token: str, error: str | None = None) -> Markup:
    problem = _alert(error)
    form = tag(
        "form",
        hidden("form_token", form_token),
        tag(
            "label",
            "Type the user id to confirm",
            tag(
                "input",
                type="text",
                name="confirm",
                id="confirm",
                required=True,
                autocomplete="off",
            ),
            for_="confirm",
        ),
        tag("button", "Forget this user", type="submit", class_="danger"),
        method="post",
        action=path("users", user, "forget"),
        class_="stack",
    )
    return join(
        [
            tag("h1", "Forget ", tag("code", user)),
            user_nav(user, "Forget this user"),
            tag(
                "p",
                "This deletes every memory and category the user owns, and their turns not "
                "yet written. It cannot be undone.",
            ),
            problem,
            form,
        ]
    )


def forget_done(report: ForgetReport) -> Markup:
    deleted = ", ".join(f"{n} {status}" for status, n in sorted(report.memories.items())) or "none"
    return join(
        [
            tag("h1", "Forgotten"),
            tag(
                "p",
                f"User {report.user}: memories deleted ({deleted}), {report.categories} "
                f"categories, {report.rows} rows.",
                class_="notice",
                role="status",
            ),
            tag("p", tag("a", "Back to users", href=path())),
        ]
    )


def problem(status: int, message: str) -> Markup:
    return join(
        [
            tag(
                "h1",
                {401: "Sign in needed", 403: "Not allowed", 404: "Not found"}.get(status, "Error"),
            ),
            _alert(message),
            tag("p", tag("a", "Back to users", href=path())),
        ]
    )
