"""Memories read in their conversation: what was said just before a memory, and
the session it belongs to.

A memory is often an answer whose question came before it ("Some fun ones, like
charades." after "What games did you play at the picnic?"), or a detail of
something named a memory earlier in the same session. Read alone it shares no word
and little meaning with a question about it; read with the memories said just
before it, it does. For a memory ``i`` with ``prior_1 … prior_T`` (the previous
memories of its session, newest first, ``turns`` = T):

* context cosine = cos(q, len_i·v_i + Σ decay^(t-1)·len_t·v_t): the cosine of the
  query with the memory's vector and its priors' (each weighted by its length in
  tokens, as the embedding of the joined text would roughly weigh them), computed
  from the per-memory cosines and a per-memory norm, so no second embedding is made
  or stored;
* context BM25 = BM25 over the memory's tokens joined with its priors' (a term said
  in both counts as said twice, with BM25's saturation — adding the priors' own
  scores would count it twice over);

and the memory's score becomes ``(1 - weight) * own + weight * context``, both fused
as the hybrid fuses its signals. Two rules keep the context to what a memory needs:

* a memory is read with what it replies to (``replies_only``): a transcript line
  said by the speaker of the line before it ("user: …" after "user: …") continues
  its own speaker and is read alone. Two people chatting answer each other; one
  user's consecutive requests to an assistant each stand alone, and their priors
  only took words from other topics;
* a prior's words count at most as many as the memory's own (``cap_prior_words``):
  for BM25 each prior's counts and length are scaled by ``min(1, own length / its
  length)``, so a long assistant answer said before a short user line does not
  drown the line's words in its own (the vector weights stay by length: capping
  them cost short answers the questions they answer);
* a long transcript line stands alone (``long_lines``, 64 tokens; a line as said,
  not a fact that keeps one as its excerpt): an assistant's answer has no priors,
  is no line's prior and takes no part in the session lift (links skip it too:
  :mod:`.links`). It matches many questions a little, so read with the user's
  lines, or lifting and lifted with them, it outranked the line that answers.
  People chatting write shorter lines: a conversation of short lines is read
  exactly as without the rule.

A memory that keeps the words it was made from (an excerpt: a fact the write path
extracted from a turn) is read in its conversation already — its BM25 document holds
the turn, and the fact was written to stand alone — so it keeps its own score:
joined with the facts stored before it, it would only take in other turns' words.
Then each memory is lifted by ``session_lift`` times the best score in its session:
of two equally good memories, the one from the conversation the best evidence came
from goes first. A memory without a session is its own session; a corpus without
sessions is ranked as without this stage.

Only the scope's corpus is read. The context index is built once per corpus
snapshot; when a write only appends memories, it is extended rather than rebuilt
(a memory's priors come before it, so appending never changes an older memory's
context); when it removes or replaces some, only the memories whose context they
were in are read again.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sidecar.config import ConversationConfig, HybridConfig
from sidecar.memory.corpus.bm25 import JoinedBM25
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.delta import taken
from sidecar.memory.corpus.derived import column_key
from sidecar.memory.corpus.features import Reader
from sidecar.memory.corpus.moves import Moves
from sidecar.memory.language.entities import speaker
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.signals import Scores, Signals, fuse
from sidecar.memory.records.records import MemoryRecord

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class ContextIndex:
    """Per memory: its priors (``-1`` past the session's start), the weights of its
    own and its priors' cosines (divided by the joined vector's norm), and BM25 over
    its tokens joined with its priors' (read from the corpus' index per query).
    ``replies``: priors only for a memory that replies to the line before it;
    ``capped``: a prior's BM25 counts weigh at most as the memory's own."""

    turns: int
    decay: float
    replies: bool
    capped: bool
    long_lines: int
    priors: Ints
    weights: npt.NDArray[np.float32]
    bm25: JoinedBM25
    #: A group number per memory, the same for the memories of one session.
    sessions: Ints
    #: Whether any memory has a prior (else every context is the memory alone).
    read_together: bool

    @classmethod
    def build(
        cls,
        corpus: Corpus,
        turns: int,
        decay: float,
        *,
        replies: bool = True,
        capped: bool = True,
        long_lines: int = 0,
    ) -> ContextIndex:
        priors = _priors(corpus, turns, replies, long_lines)
        own = np.arange(corpus.size, dtype=np.int64)
        weights = _weights(corpus, own, priors, decay)
        sessions = _sessions(corpus)
        joined = corpus.bm25.joined(priors, capped=capped)
        return cls(
            turns,
            decay,
            replies,
            capped,
            long_lines,
            priors,
            weights,
            joined,
            sessions,
            _together(priors),
        )

    def appended(self, corpus: Corpus) -> ContextIndex:
        """This index for ``corpus``, which holds this index's memories followed by
        new ones."""
        start = len(self.priors)
        own = np.arange(start, corpus.size, dtype=np.int64)
        priors = _priors(corpus, self.turns, self.replies, self.long_lines)
        return ContextIndex(
            self.turns,
            self.decay,
            self.replies,
            self.capped,
            self.long_lines,
            priors,
            np.concatenate([self.weights, _weights(corpus, own, priors[own], self.decay)]),
            corpus.bm25.joined(priors, capped=self.capped),
            _sessions(corpus),
            self.read_together or _together(priors[own]),
        )

    def remapped(self, corpus: Corpus, sources: Moves) -> ContextIndex:
        """This index for ``corpus``, whose memory ``i`` is this index's memory
        ``sources[i]`` (-1: new or changed): a memory whose priors are the same
        unchanged memories keeps its weights; the others (new ones, and those after a
        removed or changed memory in its session) are read again."""
        moves = Moves.of(sources, len(self.priors))
        source = moves.sources
        new_of_old = moves.new_of_old
        before = taken(self.priors, moves, -1)
        moved = new_of_old[before]
        moved[(before >= 0) & (moved < 0)] = -2  # a prior gone or changed
        touched = moves.touched
        if touched is None:
            priors = _priors(corpus, self.turns, self.replies, self.long_lines)
            sessions = _sessions(corpus)
            same = (source >= 0) & _rows_equal(moved, priors)
        else:
            # A row of a session no row left, entered or changed in has the same
            # neighbours as its source: its priors and session moved with it.
            priors = moved.copy()
            priors[touched] = _priors(corpus, self.turns, self.replies, self.long_lines, touched)
            sessions = new_of_old[taken(self.sessions, moves, -1)]
            _regrouped(corpus, sessions, touched)
            same = source >= 0
            same[touched] &= _rows_equal(moved[touched], priors[touched])
        again = np.flatnonzero(~same)
        weights = taken(self.weights, moves)
        weights[again] = _weights(corpus, again, priors[again], self.decay)
        return ContextIndex(
            self.turns,
            self.decay,
            self.replies,
            self.capped,
            self.long_lines,
            priors,
            weights,
            corpus.bm25.joined(priors, capped=self.capped),
            sessions,
            _together(priors),
        )

    def cosine(self, own: Scores) -> Scores:
        """Context cosines from the memories' own cosines."""
        padded = np.append(own, np.float32(0.0))  # index -1 reads the 0 appended
        out = self.weights[:, 0] * own
        for t in range(self.turns):
            out += self.weights[:, t + 1] * padded[self.priors[:, t]]
        return out.astype(np.float32)


def context_index(corpus: Corpus, config: ConversationConfig) -> ContextIndex:
    """The corpus' context index for these settings (built once per snapshot)."""
    return corpus.derived(
        (
            "context",
            config.turns,
            config.decay,
            config.replies_only,
            config.cap_prior_words,
            config.long_lines,
        ),
        lambda: ContextIndex.build(
            corpus,
            config.turns,
            config.decay,
            replies=config.replies_only,
            capped=config.cap_prior_words,
            long_lines=config.long_lines,
        ),
        structural=True,
    )


def in_context(
    base: Scores,
    signals: Signals,
    query: Query,
    corpus: Corpus,
    config: ConversationConfig,
    hybrid: HybridConfig,
) -> Scores:
    """``base`` mixed with the memories' context scores (``weight``)."""
    if config.weight <= 0 or corpus.size == 0:
        return base
    index = context_index(corpus, config)
    if not index.read_together:
        return base  # no memory has a prior: its context is itself
    context = Signals(
        cosine=index.cosine(signals.cosine),
        bm25=index.bm25.scores(query.tokens),
        lexical=signals.lexical,
        ngram=np.zeros_like(base),
    )
    if hybrid.ngram_weight > 0:  # no n-grams of joined texts: fuse the two signals
        hybrid = hybrid.model_copy(update={"ngram_weight": 0.0})
    fused = fuse(context, hybrid)
    mixed: Scores = ((1 - config.weight) * base + config.weight * fused).astype(np.float32)
    standalone = _standalone_column(corpus)
    if standalone.any():
        mixed = np.where(standalone, base, mixed)
    return mixed


def prepare_context(corpus: Corpus, config: ConversationConfig) -> Iterator[None]:
    """Make what :func:`in_context` and :func:`lift_sessions` read of ``corpus``
    whatever the question (its context index, which memories stand alone), a step
    each (see :meth:`PipelineRetriever.prepare`)."""
    if corpus.size == 0 or (config.weight <= 0 and config.session_lift <= 0):
        return
    context_index(corpus, config)
    yield
    _standalone_column(corpus)
    long_transcript_lines(corpus, config.long_lines)
    yield


#: The column of whether a memory keeps the words it was made from (an excerpt).
KEEPS_ITS_WORDS = "keeps-its-words"


def _standalone_column(corpus: Corpus) -> npt.NDArray[np.bool_]:
    """Per memory, whether it keeps the words it was made from (its context)."""
    return corpus.column(KEEPS_ITS_WORDS, _keeps_its_words, np.bool_)


def _keeps_its_words(record: MemoryRecord) -> bool:
    """Whether the memory holds what was said beside what it means (its context)."""
    return bool(record.excerpt)


def lift_sessions(scores: Scores, corpus: Corpus, config: ConversationConfig) -> Scores:
    """``scores`` plus ``session_lift`` times the best score in each memory's session."""
    lift = config.session_lift
    if lift <= 0 or corpus.size == 0:
        return scores
    index = context_index(corpus, config)
    if not index.read_together:
        return scores  # every memory is its own session
    sessions = index.sessions
    best = np.full(int(sessions.max()) + 1, -np.inf, dtype=np.float32)
    long = long_transcript_lines(corpus, config.long_lines)
    if long is None:
        np.maximum.at(best, sessions, scores)
        gain = best[sessions]
    else:
        short = ~long
        np.maximum.at(best, sessions[short], scores[short])
        # A short line's session holds a short line (itself): its best is finite.
        gain = np.where(short, best[sessions], np.float32(0))
    lifted: Scores = (scores + lift * gain).astype(np.float32)
    return lifted


def _rows_equal(a: Ints, b: Ints) -> npt.NDArray[np.bool_]:
    """Whether each row of ``a`` equals ``b``'s: column by column (a few columns;
    ``(a == b).all(axis=1)`` reduces along rows of two or three values ~8x slower)."""
    out = np.ones(len(a), dtype=bool)
    for t in range(a.shape[1]):
        out &= a[:, t] == b[:, t]
    return out


def _together(priors: Ints) -> bool:
    return priors.shape[1] > 0 and bool((priors[:, 0] >= 0).any())


def _sessions(corpus: Corpus) -> Ints:
    """Session group numbers: each memory's is the index of the first memory of its
    chain of priors (a prior comes first), found by pointer jumping: a few passes
    however long the sessions (cheap enough to redo for every snapshot)."""
    prev = corpus.session_prev.astype(np.int64)
    groups = np.where(prev >= 0, prev, np.arange(corpus.size, dtype=np.int64))
    while True:
        further = groups[groups]
        if np.array_equal(further, groups):
            return groups
        groups = further


def _regrouped(corpus: Corpus, groups: Ints, rows: Ints) -> None:
    """Set ``groups`` (:func:`_sessions`) of ``rows`` (every row of their sessions)
    again, the others left: a row's chain of priors stays in its session."""
    prev = corpus.session_prev[rows].astype(np.int64)
    groups[rows] = np.where(prev >= 0, prev, rows)
    while True:
        further = groups[groups[rows]]
        if np.array_equal(further, groups[rows]):
            return
        groups[rows] = further


def _priors(
    corpus: Corpus,
    turns: int,
    replies: bool = False,
    long_lines: int = 0,
    rows: Ints | None = None,
) -> Ints:
    """Every memory's priors, newest first (-1 past its session's start);
    ``replies``: none for a transcript line whose prior has its speaker;
    ``long_lines``: none for a line longer than this, and none from such a line on;
    ``rows``: those memories' only, in that order."""
    count = corpus.size if rows is None else len(rows)
    priors = np.full((count, turns), -1, dtype=np.int64)
    if turns == 0 or count == 0:
        return priors
    long = long_transcript_lines(corpus, long_lines)
    at = np.arange(count, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    priors[:, 0] = _back(corpus.session_prev, long, at)
    for t in range(1, turns):
        priors[:, t] = _back(corpus.session_prev, long, priors[:, t - 1])
    if replies:
        said = corpus.column("speaker", _speaker, np.int64)
        own = said if rows is None else said[rows]
        before = np.append(said, -1)[priors[:, 0]]  # index -1 reads -1 (no speaker)
        priors[(own >= 0) & (before == own), :] = -1
    return priors


def _back(
    session_prev: npt.NDArray[np.int32], long: npt.NDArray[np.bool_] | None, at: Ints
) -> Ints:
    """The prior of each of ``at`` (-1 for -1): its session's previous memory,
    none where it or that one is a long transcript line (:func:`_priors`)."""
    here = at >= 0
    safe = np.where(here, at, 0)
    prev = np.where(here, session_prev[safe], -1).astype(np.int64)
    if long is not None:
        before = prev >= 0
        prev[here & (long[safe] | (before & long[np.where(before, prev, 0)]))] = -1
    return prev


def long_transcript_lines(corpus: Corpus, limit: int) -> npt.NDArray[np.bool_] | None:
    """Whether each memory is a transcript line (it names its speaker and keeps no
    excerpt: as said, not a fact made from it) of more than ``limit`` BM25 tokens
    (once per snapshot); None when none is (or ``limit`` is 0): every stage reads
    the corpus as without the rule."""
    if limit <= 0:
        return None

    def build() -> npt.NDArray[np.bool_] | None:
        said = corpus.column("speaker", _speaker, np.int64)
        made = _standalone_column(corpus)
        long: npt.NDArray[np.bool_] = (said >= 0) & ~made & (corpus.bm25.lengths > limit)
        return long if long.any() else None

    return corpus.derived(("long-lines", limit), build, structural=True)


def _speaker(record: MemoryRecord) -> int:
    """The memory's speaker as a number (-1: none): a checksum of the name, so a
    column of them compares as integers (two names sharing one is a 2^-31 chance,
    and reads a line alone)."""
    who = speaker(record.content)
    return -1 if who is None else zlib.crc32(who.encode()) & 0x7FFFFFFF


def _weights(corpus: Corpus, own: Ints, priors: Ints, decay: float) -> npt.NDArray[np.float32]:
    """The cosine weights of the memories ``own`` (increasing) and of their
    ``priors``: each one's length in tokens (at least 1), a prior's decayed by its
    distance, all divided by the norm of the joined vector."""
    turns = priors.shape[1]
    lengths = corpus.bm25.lengths
    one = np.float32(1.0)
    weights = np.zeros((len(own), turns + 1), dtype=np.float32)
    weights[:, 0] = np.maximum(lengths[own], one)
    # No prior (-1): row 0 read with a weight of 0 adds exactly nothing, and
    # costs no masked copies.
    has = priors >= 0
    at = np.where(has, priors, 0)
    for t in range(turns):
        weights[:, t + 1] = np.where(
            has[:, t], np.float32(decay**t) * np.maximum(lengths[at[:, t]], one), np.float32(0)
        )
    norms = np.empty(len(own), dtype=np.float32)
    # A memory without priors (most of them where long lines stand alone) joins
    # its own vector alone: its priors' rows, each weighed 0, would add zeros.
    # A prior comes only after a first one, so the first column says which.
    joins = np.flatnonzero(has[:, 0]) if turns else np.zeros(0, dtype=np.int64)
    alone = np.flatnonzero(~has[:, 0]) if turns else np.arange(len(own), dtype=np.int64)
    # The joined vectors a block of rows at a time: the block's arrays stay in
    # the processor's cache, where whole-corpus temporaries went to memory (and
    # were faulted in page by page). Each row's arithmetic is the same.
    if _alone_in_place(corpus, own, weights, norms):
        alone = alone[:0]  # every row's own vector done in place; those with priors again
    for which, with_priors in ((alone, False), (joins, True)):
        for start in range(0, len(which), _WEIGHTS_BLOCK):
            rows = which[start : start + _WEIGHTS_BLOCK]
            joined = corpus.vector_rows(own[rows]) * weights[rows, :1]
            for t in range(turns if with_priors else 0):
                part = corpus.vector_rows(at[rows, t])
                part *= weights[rows, t + 1 : t + 2]
                joined += part
            norms[rows] = _row_norms(joined)
    norms[norms == 0] = 1.0
    weights /= norms[:, None]
    return weights.astype(np.float32)


def _alone_in_place(
    corpus: Corpus, own: Ints, weights: npt.NDArray[np.float32], norms: npt.NDArray[np.float32]
) -> bool:
    """Every one of ``own``'s norms as if it had no priors, read from the shared
    rows in place (no copy of them) where ``own`` (increasing) is a run of rows
    that lie in order, as a fresh snapshot's do; False, nothing set, otherwise."""
    if not len(own) or int(own[-1]) - int(own[0]) != len(own) - 1:
        return False
    first = int(own[0])
    span = corpus.vector_span(first, first + len(own))
    if span is None:
        return False
    for start in range(0, len(own), _WEIGHTS_BLOCK):
        end = start + _WEIGHTS_BLOCK
        norms[start:end] = _row_norms(span[start:end] * weights[start:end, :1])
    return True


def _row_norms(joined: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Each row's norm by np.linalg.norm's arithmetic (squares summed by row, then
    the root), squaring ``joined`` in place: both ways of reading the rows give the
    same bits."""
    norms: npt.NDArray[np.float32] = np.sqrt(
        np.add.reduce(np.multiply(joined, joined, out=joined), axis=1)
    )
    return norms


#: Rows of joined vectors made at a time (:func:`_weights`).
_WEIGHTS_BLOCK = 512


#: What this stage reads of every memory (memo name, reader): read as memories
#: enter the corpus cache (:mod:`~sidecar.memory.corpus.read_ahead`).
READ_AHEAD: tuple[tuple[str, Reader], ...] = (
    (column_key("speaker"), _speaker),
    (column_key(KEEPS_ITS_WORDS), _keeps_its_words),
)
