"""What a question names, as lifts: whom it is about, and when.

* **Subject.** "What did Melanie paint?" is about Melanie: a memory whose subject is
  Melanie (a transcript line she said, "Melanie: …", or a fact that opens with her
  name) gains ``subject_weight`` times the share of the question's names it is
  about. BM25 cannot say this: a name on half of a transcript's lines has almost no
  inverse document frequency, yet it halves what the answer can be. A name matches
  a subject that is that name, has it as one of its words ("Okafor" of "Dr.
  Okafor"), or begins with it ("Mel" of "Melanie", three letters at least).
* **Date.** "What did I cook on 9 November?" (:func:`~sidecar.memory.language.when.
  question_spans`): a memory told within a day of the span gains ``date_weight``,
  one told up to ``near_days`` after it half that (what happened is often told a
  few days later).
* **When.** A question that asks for a time ("When did…", "What year…") is
  answered by a memory that says one ("last week", "on Friday", "in 2019"): such
  memories gain ``when_weight``.
* **Amount.** A question that asks how many, how much, how long or what size
  (:func:`~sidecar.memory.language.amounts.asks_amount`) is answered by a memory
  that states an amount ("two weeks", "a 55-inch TV", "$120"; a date is not one):
  such memories gain ``amount_weight``.

* **Past.** A question about what the user did or was ("What did I buy?", "How long
  was I in Japan?"; :func:`~sidecar.memory.language.intent.asks_past`) is not
  answered by a wish or request ("User is looking to buy …", "User is considering
  visiting Japan"; :func:`~sidecar.memory.language.intent.wish`): such memories lose
  ``past_weight``.

Lifts add to the fused score; they admit nothing the evidence gate keeps out, and a
question that names no one and no date is ranked as without them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sidecar.config import CueConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.derived import column_key
from sidecar.memory.corpus.features import Reader
from sidecar.memory.corpus.moves import Moves
from sidecar.memory.language.amounts import asks_amount, tells_amount
from sidecar.memory.language.entities import names, subject
from sidecar.memory.language.intent import asks_past, wish
from sidecar.memory.language.text import STOPWORDS
from sidecar.memory.language.when import DAY_MS, Span, asks_when, question_spans, tells_time
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.signals import Scores
from sidecar.memory.records.records import MemoryRecord

Ints = npt.NDArray[np.int64]
_MIN_NICKNAME = 3
_CAPITALISED = re.compile(r"\b[A-Z][a-z][\w'’]*")
_POSSESSIVE = re.compile(r"['’]s$")


def lift_cues(base: Scores, query: Query, corpus: Corpus, config: CueConfig, now_ms: int) -> Scores:
    """``base`` with the subject, date, when, amount and past cues for ``query``."""
    if corpus.size == 0:
        return base
    out = base
    if config.subject_weight > 0:
        about = subject_share(query.text, corpus)
        if about is not None:
            out = out + config.subject_weight * about
    if config.date_weight > 0:
        spans = question_spans(query.text, now_ms)
        if spans:
            out = out + config.date_weight * date_match(spans, corpus, config.near_days)
    if config.when_weight > 0 and asks_when(query.text):
        out = out + config.when_weight * _timed(corpus)
    if config.amount_weight > 0 and asks_amount(query.text):
        out = out + config.amount_weight * _amounts(corpus)
    if config.past_weight > 0 and asks_past(query.text):
        out = out - config.past_weight * _wishes(corpus)
    lifted: Scores = out.astype(np.float32)
    return lifted


def prepare_cues(corpus: Corpus, config: CueConfig) -> Iterator[None]:
    """Make the columns :func:`lift_cues` reads of ``corpus`` for some question (who
    each memory is about, when it was told, which tell a time, an amount or a wish),
    a step each (see :meth:`PipelineRetriever.prepare`)."""
    if corpus.size == 0:
        return
    if config.subject_weight > 0:
        _subjects(corpus)
        yield
    if config.date_weight > 0:
        _told(corpus)
    if config.when_weight > 0:
        _timed(corpus)
    if config.amount_weight > 0:
        _amounts(corpus)
    if config.past_weight > 0:
        _wishes(corpus)
    yield


def _timed(corpus: Corpus) -> Scores:
    """1 for the memories that say when something happened, else 0."""
    return corpus.column("tells-time", _tells_time, np.float32)


def _tells_time(record: MemoryRecord) -> bool:
    return tells_time(record.content)


def _amounts(corpus: Corpus) -> Scores:
    """1 for the memories that state an amount, else 0."""
    return corpus.column("tells-amount", _tells_amount, np.float32)


def _tells_amount(record: MemoryRecord) -> bool:
    return tells_amount(record.content)


def _wishes(corpus: Corpus) -> Scores:
    """1 for the memories that tell a wish or request, else 0."""
    return corpus.column("wish", _wish, np.float32)


def _wish(record: MemoryRecord) -> bool:
    return wish(record.content)


def subject_share(text: str, corpus: Corpus) -> Scores | None:
    """Per memory, the share of the names in ``text`` that it is about (None when
    ``text`` names no one). A capitalised word that the rules of
    :func:`~sidecar.memory.language.entities.names` do not read as a name ("Jolene"
    opening "Jolene said what…": a name or a sentence opener?) counts when it is
    one of the corpus' subjects."""
    subjects = _subjects(corpus)
    said = names(text)
    matched = {name: subjects.named(name) for name in said}
    for word in _CAPITALISED.findall(text):
        bare = _POSSESSIVE.sub("", word)
        if bare.lower() in STOPWORDS or bare in matched:
            continue
        keys = subjects.named(bare)
        if keys:
            matched[bare] = keys
    if not matched:
        return None
    share = np.zeros(corpus.size, dtype=np.float32)
    for keys in matched.values():
        hit = np.zeros(corpus.size, dtype=np.bool_)
        for key in keys:
            hit[subjects.members[key]] = True
        share += hit
    result: Scores = (share / len(matched)).astype(np.float32)
    return result


@dataclass(frozen=True, slots=True)
class Subjects:
    """The corpus' subjects (lower case), each with the memories about it; extended,
    not read again, when memories are only appended."""

    size: int = 0
    members: dict[str, Ints] = field(default_factory=dict)

    def named(self, name: str) -> list[str]:
        """The subjects ``name`` names: the subject itself, one of its words
        ("Okafor" of "Dr. Okafor"), or its first letters ("Mel" of "Melanie", three
        letters at least)."""
        low = name.lower()
        return [
            key
            for key in self.members
            if key == low
            or low in key.split()
            or (len(low) >= _MIN_NICKNAME and key.startswith(low))
        ]

    def appended(self, corpus: Corpus) -> Subjects:
        found: dict[str, list[int]] = {}
        for i, about in enumerate(corpus.read_all("subject", _subject, self.size), self.size):
            if about is not None:
                found.setdefault(about, []).append(i)
        members = dict(self.members)
        for key, rows in found.items():
            new = np.asarray(rows, dtype=np.int64)
            old = members.get(key)
            members[key] = new if old is None else np.concatenate([old, new])
        return Subjects(corpus.size, members)

    def remapped(self, corpus: Corpus, sources: Moves) -> Subjects:
        """These subjects for ``corpus``, whose memory ``i`` is memory ``sources[i]``
        here (-1: new or changed, read again)."""
        moves = Moves.of(sources, self.size)
        new_of_old = moves.new_of_old
        found: dict[str, list[Ints]] = {}
        for key, rows in self.members.items():
            moved = new_of_old[rows]
            found.setdefault(key, []).append(moved[moved >= 0])
        for i in moves.fresh.tolist():
            about = corpus.read("subject", i, _subject)
            if about is not None:
                found.setdefault(about, []).append(np.asarray([i], dtype=np.int64))
        members = {}
        for key, parts in found.items():
            rows = np.sort(np.concatenate(parts))
            if len(rows):
                members[key] = rows
        return Subjects(corpus.size, members)


def _subject(record: MemoryRecord) -> str | None:
    """Whom a memory is about, lower case (None: the user, or no one named)."""
    about = subject(record.content)
    return about.lower() if about is not None else None


def date_match(spans: tuple[Span, ...], corpus: Corpus, near_days: int) -> Scores:
    """1 for a memory told within a day of a span, 0.5 up to ``near_days`` after
    one, else 0 (the best over the spans)."""
    told = _told(corpus)
    out = np.zeros(corpus.size, dtype=np.float32)
    for span in spans:
        if span.calendar:
            inside = _calendar(told, span)
            out[inside] = 1.0
            continue
        near = (told >= span.end_ms) & (told < span.end_ms + near_days * DAY_MS)
        out[near] = np.maximum(out[near], 0.5)
        out[(told >= span.start_ms - DAY_MS) & (told < span.end_ms + DAY_MS)] = 1.0
    return out


def _subjects(corpus: Corpus) -> Subjects:
    return corpus.derived("subjects", lambda: Subjects().appended(corpus), structural=True)


def _told(corpus: Corpus) -> npt.NDArray[np.int64]:
    """When each memory was told (ms)."""
    return corpus.column("created-at", _created_at, np.int64)


def _created_at(record: MemoryRecord) -> int:
    return record.created_at


def _calendar(told: Ints, span: Span) -> npt.NDArray[np.bool_]:
    """The memories told in ``span``'s month (and on its day), in any year (UTC)."""
    moments = told.astype("datetime64[ms]")
    months = moments.astype("datetime64[M]")
    inside: npt.NDArray[np.bool_] = months.astype(np.int64) % 12 + 1 == span.month
    if span.day is not None:
        days = (moments.astype("datetime64[D]") - months).astype(np.int64) + 1
        inside &= days == span.day
    return inside


#: What the cue stage reads of every memory (memo name, reader): read as memories
#: enter the corpus cache (:mod:`~sidecar.memory.corpus.read_ahead`).
READ_AHEAD: tuple[tuple[str, Reader], ...] = (
    (column_key("tells-time"), _tells_time),
    (column_key("tells-amount"), _tells_amount),
    (column_key("wish"), _wish),
    ("subject", _subject),
)
