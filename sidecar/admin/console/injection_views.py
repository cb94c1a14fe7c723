"""The console's "why was this injected?" pages: a user's kept injections and one
injection's memories with their scores, how each was found and its signals."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.admin.console.html import Markup, join, path, table, tag, when
from sidecar.admin.console.views import short, user_nav
from sidecar.admin.explain import Explained
from sidecar.memory.read.injections import Injection
from sidecar.memory.read.retrieval.base import Stage


def injections(user: str, items: Sequence[Injection] | None) -> Markup:
    parts: list[object] = [
        tag("h1", "Injections for ", tag("code", user)),
        user_nav(user, "Injections"),
    ]
    if items is None:
        parts.append(
            tag(
                "p",
                "No route profile keeps its injections explained. Set injection.explain_last "
                "(for example 20) on a profile to see why memories were injected.",
                class_="sub",
            )
        )
        return join(parts)
    rows = [
        [
            tag("td", when(i.at_ms), class_="when"),
            tag(
                "a",
                i.request_id,
                href=path("users", user, "injections", i.request_id),
                class_="mono",
            ),
            short(i.query, 120),
            short(i.rewritten, 120) if i.rewritten else "—",
            tag("td", str(len(i.memories)), class_="num"),
        ]
        for i in items
    ]
    parts.append(
        tag("p", f"The last {len(items)} kept by this process, newest first.", class_="sub")
    )
    parts.append(table(["When", "Request", "Query", "Rewritten", "Memories"], rows, "Injections"))
    return join(parts)


def injection(user: str, explained: Explained) -> Markup:
    kept = explained.injection
    facts: list[tuple[str, object]] = [
        ("Request", tag("code", kept.request_id)),
        ("When", when(kept.at_ms)),
        ("Route profile", kept.profile),
        ("Searched for", kept.query),
        ("Rewritten as", kept.rewritten or "— (used as asked)"),
        ("Deep search", kept.deep or "—"),
    ]
    rows = []
    for rank, entry in enumerate(explained.memories, 1):
        why = entry.why
        text: object = (
            tag("a", short(entry.record.content), href=path("users", user, "memories", why.id))
            if entry.record is not None and entry.record.user_id == user
            else (
                short(entry.record.content)
                if entry.record is not None
                else tag("em", "gone (deleted or no longer shared)")
            )
        )
        signals = ", ".join(f"{k} {v:.3f}" for k, v in why.signals.items()) or "—"
        owner = "own" if why.owner == user else f"{why.visibility}, shared by {why.owner}"
        rows.append(
            [
                tag("td", str(rank), class_="num"),
                text,
                tag("td", f"{why.score:.3f}", class_="num"),
                why.via,
                tag("td", signals, class_="signals"),
                owner,
            ]
        )
    return join(
        [
            tag("p", tag("a", "← Injections", href=path("users", user, "injections"))),
            tag("h1", "Why these memories were injected"),
            tag("dl", *(join([tag("dt", k), tag("dd", v)]) for k, v in facts), class_="facts"),
            tag("h2", "In the block, in order"),
            table(
                ["#", "Memory", "Score", "Found by", "Signals", "Whose"], rows, "Injected memories"
            ),
            tag(
                "p",
                "Score: the route's strategy's final score. Signals: cosine similarity to "
                "the query, BM25 (lexical: its share of the best possible), character "
                "n-gram overlap; then the score after each stage that changed it: "
                + ", ".join(f"{stage} ({stage.meaning})" for stage in Stage)
                + ". Found by: direct search, a link from a found memory, "
                "associative expansion or deep search.",
                class_="sub",
            ),
        ]
    )
