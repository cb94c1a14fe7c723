"""The read path, per profile: the retrieval strategy and its stages
(``retrieval``) and how the results are injected (``injection``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from sidecar.config.base import _header_name, _Model
from sidecar.config.experimental import (
    AssociativeConfig,
    HierarchyConfig,
    HybridExperiments,
    TieredConfig,
)

#: Retrieval strategies by name (see sidecar/memory/read/retrieval/registry.py).
StrategyName = Literal[
    "dense",
    "dense-milvus",
    "bm25",
    "bm25-milvus",
    "ngram",
    "hybrid",
    "hybrid-rrf",
    "linked",
    "default",
    "associative",
    "hierarchical",
    "tiered",
]


class HybridConfig(HybridExperiments):
    """Fusion of vector cosine, BM25 and character n-gram similarity."""

    #: ``weighted``: each signal is min-max normalised over the scope's corpus, then
    #: summed with these weights (they need not sum to 1; they are renormalised).
    #: BM25 gets more weight than in the 0.7/0.2/0.1 often quoted, because stems and
    #: names carry much of the signal (docs/design/retrieval-scoring.md).
    dense_weight: float = Field(default=0.5, ge=0)
    #: Weight of the BM25 signal (``weighted`` fusion).
    bm25_weight: float = Field(default=0.5, ge=0)

    @model_validator(mode="after")
    def _some_weight(self) -> HybridConfig:
        if self.dense_weight + self.bm25_weight + self.ngram_weight <= 0:
            raise ValueError("at least one hybrid weight must be positive")
        return self


class LinkConfig(_Model):
    """Expansion along persisted links (``related_ids``: write-time similarity links and
    the previous/next memory of the same session)."""

    #: Expand results along persisted links.
    enabled: bool = True
    #: Hops followed from a direct hit (0: no expansion).
    max_link_depth: int = Field(default=1, ge=0, le=4)
    #: A linked memory scores ``blend * referrer + (1 - blend) * own``, times
    #: ``hop_decay ** (hop - 1)``; final = max(direct, linked) (a hub's share is
    #: split: ``hub_links``). About a third: a
    #: neighbour of a strong hit rises, but not above direct hits of its own worth
    #: (half the referrer's score lifted a long session's neighbours over the
    #: evidence; a quarter lost memories that code and notes reach only by links;
    #: bridges rise by ``support``, not by this).
    blend: float = Field(default=0.35, ge=0, le=1)
    #: Score factor per further hop (see ``blend``).
    hop_decay: float = Field(default=0.8, gt=0, le=1)
    #: Mutual support along bridge links (a persisted link between a fact about the
    #: user and one about someone or something else, one hop from a referrer): such
    #: a memory with evidence of its own also scores ``own + support * referrer``
    #: when that is more, so the bridge fact and the fact about the entity it names
    #: rise together above look-alikes nothing links to. 0 = off.
    support: float = Field(default=1.0, ge=0, le=1)
    #: At most this share of the top-k may be memories that rank there only
    #: through a link: direct hits are never all pushed out.
    max_share: float = Field(default=0.5, ge=0, le=1)
    #: Count the previous/next memory of the same session as a link. Off: the
    #: conversation context (``conversation``) already reads a line with what it
    #: replies to and lifts a session's lines together; a link to the neighbours as
    #: well lifted a strong hit's session over evidence told in other sessions (a
    #: question asked across sessions), and added nothing where the context runs.
    session_neighbors: bool = False
    #: Links are not followed from or to a transcript line of more than this many
    #: BM25 tokens, as ``conversation.long_lines`` (0: no limit): a long answer is
    #: linked to much and would lift, or be lifted over, the lines that answer.
    long_lines: int = Field(default=64, ge=0)
    #: A referrer with more neighbours than this shares its lift among them: each
    #: gets ``blend * referrer * hub_links / degree`` in place of ``blend * referrer``
    #: (0: no limit). A memory linked to many others is mostly linked by what they
    #: all share (a template, boilerplate, a common topic), so its lift says little
    #: about any one of them; a few similar facts (and a session's lines, where
    #: ``session_neighbors``) keep it all.
    hub_links: int = Field(default=4, ge=0)


class TopicConfig(_Model):
    """Named topics as retrieval evidence (strategies ``default`` and ``associative``).

    A leaf category under a *named topic* (a topic the extraction LLM or an import
    gave the memories; never a category the clustering made up) scores the mean of
    its ``evidence`` best members' fused scores. The ``max_topics`` best such
    categories with at least one member passing the evidence gate are opened; each
    member then scores ``max(own, alpha * own + (1 - alpha) * category)`` and is
    admitted on its category's evidence. A store without named topics ranks exactly
    as without this stage (docs/design/named-topics.md).
    """

    enabled: bool = True
    #: Weight of a member's own score against its category's (see above).
    alpha: float = Field(default=0.2, ge=0, le=1)
    #: Best members averaged into a category's score.
    evidence: int = Field(default=1, ge=1, le=100)
    #: Categories opened per query.
    max_topics: int = Field(default=6, ge=1, le=100)
    #: Members lifted per opened category, its best by own score (a big topic that
    #: ``evolve`` has not split yet must not flood the results).
    max_members: int = Field(default=20, ge=1, le=10_000)


class ConversationConfig(_Model):
    """Memories read in their conversation (strategies ``default`` and
    ``associative``; sidecar/memory/read/retrieval/conversation.py): a memory scores
    with the memories said just before it in its session, and memories of the
    session the best evidence came from rise together. Without session ids (no
    ``session_header`` sent) every memory is its own session and this changes
    nothing."""

    enabled: bool = True
    #: Share of a memory's score that comes from it read with its priors (0: own
    #: score only).
    weight: float = Field(default=0.5, ge=0, le=1)
    #: Earlier memories of the session read with each memory.
    turns: int = Field(default=2, ge=1, le=8)
    #: Vector weight of each further prior (the first counts fully, the next
    #: ``decay`` as much, ...); every prior's words count fully for BM25.
    decay: float = Field(default=0.5, gt=0, le=1)
    #: Each memory gains this times the best score in its session.
    session_lift: float = Field(default=0.2, ge=0, le=1)
    #: Read a memory with its priors only when it replies to the line before it: a
    #: transcript line that follows one of its own speaker's ("user: …" after
    #: "user: …") is read alone (one user's requests to an assistant each stand
    #: alone; two people chatting answer each other). Facts and notes, which name
    #: no speaker, are unaffected.
    replies_only: bool = True
    #: A prior's words count, for BM25, at most as many as the memory's own (a long
    #: answer said before a short line does not drown the line's words).
    cap_prior_words: bool = True
    #: A transcript line (one that names its speaker, as said: not a fact that keeps
    #: a turn as its excerpt) of more than this many BM25 tokens stands alone: it has
    #: no priors, is no line's prior, and neither gives nor takes the session lift
    #: (0: no limit). An assistant's long answer matches many questions a little;
    #: read with the user's short lines, or lifting and lifted with them, it drowned
    #: them. People chatting write shorter lines.
    long_lines: int = Field(default=64, ge=0)


class CueConfig(_Model):
    """Lifts for what a question names or asks (strategies ``default`` and
    ``associative``; sidecar/memory/read/retrieval/cues.py): whom it is about, the
    date it names, and whether it asks when, for an amount or about the past. They
    add to (or, for wishes under a question about the past, take from) the fused
    score and admit nothing the evidence gate keeps out."""

    enabled: bool = True
    #: Lift of a memory whose subject (a transcript line's speaker, a fact's opening
    #: name) is a name the question says, times the share of its names matched.
    subject_weight: float = Field(default=0.2, ge=0, le=1)
    #: Lift of a memory told on a date the question names ("on 9 November", "in
    #: June 2023", "last week"); half of it up to ``near_days`` after that date.
    date_weight: float = Field(default=0.2, ge=0, le=1)
    #: How long after a named date a memory still counts as told about then.
    near_days: int = Field(default=7, ge=0, le=60)
    #: Lift of a memory that says when something happened ("last week", "on
    #: Friday", "in 2019") for a question that asks when.
    when_weight: float = Field(default=0.1, ge=0, le=1)
    #: Lift of a memory that states an amount ("two weeks", "a 50-pound bag",
    #: "$120"; not a date) for a question that asks how many, how much, how long,
    #: what size or what total.
    amount_weight: float = Field(default=0.1, ge=0, le=1)
    #: Taken from a memory that tells a wish or request ("User is looking for …",
    #: "would love to …") for a question about what the user did or was ("What did I
    #: buy?", "How long was I in Japan?"): what happened answers it, not a wish.
    past_weight: float = Field(default=0.15, ge=0, le=1)


class RerankConfig(_Model):
    """Composite final score: similarity, salience and confidence."""

    #: Apply the composite re-rank (strategy ``default``).
    enabled: bool = True
    #: Weight of retrieval similarity in the final score.
    similarity_weight: float = Field(default=0.5, ge=0)
    #: Weight of salience in the final score.
    salience_weight: float = Field(default=0.3, ge=0)
    #: Weight of the memory's confidence in the final score.
    confidence_weight: float = Field(default=0.2, ge=0)
    #: Salience = importance, access frequency and recency, weighted so.
    importance_weight: float = Field(default=0.4, ge=0)
    #: Salience weight of access frequency.
    access_weight: float = Field(default=0.2, ge=0)
    #: Salience weight of recency.
    recency_weight: float = Field(default=0.4, ge=0)
    #: Days after which the recency term halves.
    recency_half_life_days: float = Field(default=30.0, gt=0)
    #: Only the best candidates (by similarity) are re-ranked: salience reorders
    #: relevant memories, it never lifts irrelevant ones.
    pool: int = Field(default=20, ge=1, le=1000)


class RetrievalConfig(_Model):
    #: Retrieve and inject memories on this route.
    enabled: bool = True
    #: The retrieval strategy. For production: ``default`` (hybrid fusion, named
    #: topics, links and the composite re-rank) and its cheaper subsets ``hybrid``
    #: and ``linked``. Evaluation baselines and alternatives, kept for ``sidecar
    #: eval``: ``dense``, ``bm25`` and ``ngram`` (one signal each), ``dense-milvus``
    #: and ``bm25-milvus`` (the store's own search), ``hybrid-rrf``, ``associative``,
    #: ``hierarchical`` and ``tiered`` (their settings are experimental).
    strategy: StrategyName = "default"
    #: Most memories injected per request.
    top_k: int = Field(default=5, ge=1, le=100)
    #: Evidence gate, meaningful in every mode: a memory is returned only if its
    #: cosine similarity reaches ``threshold`` or its BM25 score reaches
    #: ``lexical_threshold`` of the query's best possible score (or both reach
    #: ``joint_gate`` of theirs). Fused scores are relative to the corpus, so they
    #: are never thresholded directly.
    threshold: float = Field(default=0.2, ge=-1.0, le=1.0)
    #: The BM25 evidence gate: a share of the query's best possible BM25 score.
    lexical_threshold: float = Field(default=0.15, ge=0.0, le=1.0)
    #: Two weak signals agreeing are evidence too: a memory whose cosine and BM25
    #: share both reach this fraction of their gates passes. A fact told in passing
    #: in a long message ("...and by the way, I finished a 5K in 35 minutes") has its
    #: meaning and its words diluted alike. 1: each signal must pass on its own.
    joint_gate: float = Field(default=0.5, gt=0.0, le=1.0)
    #: Request-path budget for retrieval; past it the request goes on without memory.
    timeout_ms: int = Field(default=500, ge=1, le=60_000)
    #: Longest query text searched, in characters. A longer message is searched by
    #: its question: its last (or first) paragraph when that asks something or is
    #: short, else its last question sentence, else its head and tail.
    max_query_chars: int = Field(default=2000, ge=16)
    #: Candidates scored in depth (links, rerank) before the top-k is cut.
    candidate_pool: int = Field(default=50, ge=1, le=10_000)
    #: The request path keeps a scope's rankings (per query text, strategy and k)
    #: with the scope's corpus snapshot for this long: a question asked again (each
    #: round trip of an agent's tool loop) is answered without ranking while the
    #: scope's memories are unchanged — any change makes a new snapshot. Re-rank
    #: recency (a 30-day half-life) moves by at most this much meanwhile. 0: off.
    ranking_cache_ttl_s: float = Field(default=60.0, ge=0)
    #: Most rankings kept per scope snapshot (least recently used evicted).
    ranking_cache_entries: int = Field(default=16, ge=1, le=10_000)
    hybrid: HybridConfig = HybridConfig()
    conversation: ConversationConfig = ConversationConfig()
    cues: CueConfig = CueConfig()
    links: LinkConfig = LinkConfig()
    topics: TopicConfig = TopicConfig()
    associative: AssociativeConfig = AssociativeConfig()
    hierarchy: HierarchyConfig = HierarchyConfig()
    tiered: TieredConfig = TieredConfig()
    rerank: RerankConfig = RerankConfig()


class InjectionConfig(_Model):
    """Where and how the memory block reaches the model."""

    #: ``message``: the block is its own message (``role``) right before the latest
    #: user message. Everything before it is the client's conversation byte for
    #: byte, so the inference server's prefix cache (vLLM's automatic prefix
    #: caching, a hosted prompt cache) keeps the whole history from one turn to the
    #: next. ``user``: the same place, inside the latest user message (before its
    #: text), for chat templates that reject a system message after the first or
    #: two user messages in a row. ``system``: inside the system prompt (``mode``),
    #: with the system prompt's authority, but whenever the retrieved memories
    #: change the prompt differs from its first message on and the whole
    #: conversation is prefilled again.
    placement: Literal["message", "user", "system"] = "message"
    #: Role of the memory message (placement ``message``). ``developer`` for
    #: servers whose templates know it (OpenAI-style reasoning models).
    role: Literal["system", "developer", "user"] = "system"
    #: Placement ``system``: ``append`` adds the block to the first system message
    #: (or prepends a system message when there is none); ``prepend``: always a new
    #: first message.
    mode: Literal["append", "prepend"] = "append"
    #: Token budget of the injected block (estimated at 4 characters per token).
    max_tokens: int = Field(default=1000, ge=25, le=100_000)
    #: Under a memory of the user's own, at most this many characters of what was
    #: said (its excerpt, the part nearest the question) where it carries a number,
    #: a list or a name the fact alone loses; 0: never.
    excerpt_chars: int = Field(default=300, ge=0, le=4000)
    #: Label each memory with its category name ("- (Pets) User has a dog ...";
    #: in parentheses: a bracketed name could spell a template token).
    category_labels: bool = True
    #: Response headers describing the query rewrite and deep search decisions
    #: (``x-memory-rewrite: llm;confidence=0.90``, ``x-memory-deep-search: ...``).
    #: Reasons and numbers only: never query or memory text.
    debug_headers: bool = False
    #: Response header telling the client how many memories were injected ('' = none).
    response_header: str = "x-memory-injected"
    #: Keep why each of a user's last N blocks was injected: the request id, the
    #: query as searched and rewritten, each memory's id, score and signals. Kept in
    #: this process's memory only, for the admin API and the console; never logged,
    #: dropped when the user is forgotten. Private data: 0 (off) by default.
    explain_last: int = Field(default=0, ge=0, le=1000)
    #: Response header carrying the request id an explained injection is found by
    #: ('' = none); sent only when the block was kept.
    explain_header: str = "x-memory-request-id"

    @field_validator("response_header", "explain_header")
    @classmethod
    def _check_header(cls, value: str) -> str:
        return value if value == "" else _header_name(value)
