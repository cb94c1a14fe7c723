#!/usr/bin/env python
"""Build an evaluation set of ambiguous follow-up questions from LoCoMo.

Nothing third-party is committed: this script reads ``locomo-dev.json`` (LoCoMo,
CC BY-NC 4.0, evaluation only; see ../shared/data/FORMAT.md) and writes the derived
set to ``out/`` (git-ignored) or ``--out``. It is deterministic.

Every LoCoMo question naming exactly one of its conversation's two speakers
becomes a follow-up: the name is replaced by a pronoun ("When did Caroline go to
the LGBTQ support group?" -> "When did she go to the LGBTQ support group?"), and
for every other question whose object is a determiner phrase at the end, that
phrase too ("When did she go to it?"). The ``context`` holds earlier chat turns
that mention the name (and the phrase): one of a few templates, chosen by the
question's position, some with the conversation's other speaker mentioned first
as a distractor. Memories, ``relevant_ids`` and ``user_id`` are LoCoMo's; the
``category`` is the kind of follow-up (``pronoun``, ``pronoun+it``).

    .venv/bin/python -m scripts.build_followups            # -> out/locomo-followups.json
    .venv/bin/python -m scripts.build_followups --out /tmp/f.json --limit 100
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from scripts.benchlib import REPO

DEFAULT_SOURCE = REPO.parent / "shared" / "data" / "locomo-dev.json"
DEFAULT_OUT = REPO / "out" / "locomo-followups.json"

#: LoCoMo dev speakers -> (subject, object, possessive) pronouns.
PRONOUNS: dict[str, tuple[str, str, str]] = {
    "f": ("she", "her", "her"),
    "m": ("he", "him", "his"),
    "x": ("they", "them", "their"),
}
GENDER: dict[str, str] = {
    "Caroline": "f",
    "Melanie": "f",
    "Gina": "f",
    "Maria": "f",
    "Joanna": "f",
    "Jon": "m",
    "John": "m",
    "Nate": "m",
    "Tim": "m",
}
_SUBJECT_BEFORE = frozenset(
    """did does do is was were are has had have would will can could should might may
    when what where how why who which whom""".split()
)
#: A determiner phrase at the end of a question: "... go to the LGBTQ support group?"
_OBJECT_PHRASE = re.compile(r"\b((?:the|a|an) (?:[\w'-]+ ){0,3}[\w'-]+)\s*\?\s*$", re.IGNORECASE)
_VAGUE = frozenset({"time", "first", "last", "same", "one", "other", "way", "day", "year"})

TEMPLATES_NAME: tuple[tuple[tuple[str, str], ...], ...] = (
    (
        ("user", "I've been thinking about {name} lately."),
        (
            "assistant",
            "{name} came up in several of your conversations. What would you like to know?",
        ),
    ),
    (
        ("user", "Can we talk about {name} for a moment?"),
        ("assistant", "Of course. What do you want to know about {name}?"),
    ),
    (
        ("user", "I had a long chat with {other} yesterday."),
        ("assistant", "Nice! How is {other} doing?"),
        ("user", "Fine, thanks. Now I have a question about {name}."),
        ("assistant", "Sure, go ahead."),
    ),
)
TEMPLATES_THING: tuple[tuple[tuple[str, str], ...], ...] = (
    (
        ("user", "Do you remember what {name} said about {thing}?"),
        ("assistant", "Yes, {name} mentioned {thing} in one of your chats."),
    ),
    (
        ("user", "{name} told me about {thing} once."),
        ("assistant", "That sounds interesting. What would you like to know?"),
    ),
    (
        ("user", "I was talking to {other} earlier."),
        ("assistant", "How did that go?"),
        ("user", "Good. It reminded me of {name} and {thing}."),
        ("assistant", "What would you like to know about that?"),
    ),
)


def speakers(memories: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each conversation's two speakers (LoCoMo turns read 'Name: text')."""
    counts: dict[str, Counter[str]] = {}
    for memory in memories:
        name = memory["content"].split(":", 1)[0].strip()
        counts.setdefault(memory["user_id"], Counter())[name] += 1
    return {user: [n for n, _ in c.most_common(2)] for user, c in counts.items()}


def pronominalise(question: str, name: str) -> str | None:
    """``question`` with ``name`` replaced by the right pronoun (None if absent)."""
    subject, obj, possessive = PRONOUNS[GENDER.get(name, "x")]
    pattern = re.compile(rf"\b{re.escape(name)}(['’]s)?\b")
    match = pattern.search(question)
    if match is None:
        return None
    before = question[: match.start()].split()
    previous = before[-1].lower().strip(",") if before else ""
    if match.group(1):
        pronoun = possessive
    elif not before or previous in _SUBJECT_BEFORE:
        pronoun = subject
    else:
        pronoun = obj
    if not before:
        pronoun = pronoun.capitalize()
    return question[: match.start()] + pronoun + question[match.end() :]


def object_phrase(question: str) -> str | None:
    match = _OBJECT_PHRASE.search(question)
    if match is None:
        return None
    phrase = match.group(1)
    words = phrase.lower().split()
    if len(words) < 2 or words[-1] in _VAGUE or any(w in PRONOUN_WORDS for w in words):
        return None
    return phrase


PRONOUN_WORDS = frozenset({"he", "she", "they", "him", "her", "them", "his", "their", "it"})


def build(source: dict[str, Any], limit: int | None = None) -> dict[str, Any]:
    names = speakers(source["memories"])
    queries: list[dict[str, Any]] = []
    kinds: Counter[str] = Counter()
    eligible = 0
    for query in source["queries"]:
        pair = names.get(query["user_id"], [])
        mentioned = [n for n in pair if re.search(rf"\b{re.escape(n)}\b", query["query"])]
        if len(mentioned) != 1 or len(pair) != 2:
            continue
        name = mentioned[0]
        other = pair[1] if pair[0] == name else pair[0]
        followup = pronominalise(query["query"], name)
        if followup is None:
            continue
        eligible += 1
        thing = object_phrase(followup) if eligible % 2 == 0 else None
        if thing is not None:
            followup = (
                followup[: followup.rindex(thing)]
                + "it"
                + followup[followup.rindex(thing) + len(thing) :]
            )
            template = TEMPLATES_THING[eligible % len(TEMPLATES_THING)]
            kind = "pronoun+it"
            shown = thing[0].lower() + thing[1:]
            if shown.split()[0] in ("a", "an"):
                shown = "the " + shown.split(" ", 1)[1]
        else:
            template = TEMPLATES_NAME[eligible % len(TEMPLATES_NAME)]
            kind = "pronoun"
            shown = ""
        context = [
            {"role": role, "content": text.format(name=name, other=other, thing=shown)}
            for role, text in template
        ]
        kinds[kind] += 1
        queries.append(
            {
                "id": f"{query['id']}:followup",
                "user_id": query["user_id"],
                "query": followup,
                "relevant_ids": list(query["relevant_ids"]),
                "category": kind,
                "group_ids": list(query.get("group_ids") or []),
                "context": context,
            }
        )
        if limit is not None and len(queries) >= limit:
            break
    return {
        "name": "locomo-followups",
        "description": (
            f"{len(queries)} ambiguous follow-up questions derived from {source.get('name')} "
            "by scripts/build_followups.py (speaker name -> pronoun, some objects -> 'it'; "
            "earlier chat turns naming them in 'context'). LoCoMo (snap-research/locomo) is "
            "CC BY-NC 4.0: evaluation only, do not commit."
        ),
        "memories": source["memories"],
        "queries": queries,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--limit", type=int, help="at most this many follow-ups")
    args = parser.parse_args(argv)
    try:
        source = json.loads(args.source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"cannot read {args.source}: {exc}", file=sys.stderr)
        return 1
    dataset = build(source, args.limit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dataset, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    kinds = Counter(q["category"] for q in dataset["queries"])
    print(
        f"wrote {args.out}: {len(dataset['queries'])} follow-ups "
        f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}), "
        f"{len(dataset['memories'])} memories"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
