"""The write path: the durable queue (``write_queue``), fact extraction (per
profile), what every memory is enriched with (``enrichment``), the per-user
category tree (``hierarchy``) and the per-user cap (``retention``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from sidecar.config.base import Fraction, _Model
from sidecar.config.experimental import HierarchyBuildExperiments


class WriteQueueConfig(_Model):
    """The durable queue between the response path and the write pipeline: every
    accepted turn is in the journal before the response phase returns, and is
    written (per user in acceptance order) even across a crash or restart."""

    #: Turns accepted and not yet written, at most; beyond it new turns are shed
    #: (and counted).
    max_pending: int = Field(default=10_000, ge=1)
    #: Turns written concurrently (always of different users).
    workers: int = Field(default=2, ge=1, le=64)
    #: Seconds SIGTERM waits for queued turns to be written (the rest stay in the
    #: journal for the next start).
    drain_timeout_s: float = Field(default=30.0, ge=0)
    #: The SQLite journal file (WAL). It holds conversation text until written; one
    #: sidecar process per file (it is locked while open).
    journal_path: str = "./data/journal.sqlite3"
    #: ``normal``: an accepted turn survives the process dying (kill -9, OOM);
    #: ``full``: also a power loss, for one fsync per turn on the response path.
    journal_sync: Literal["normal", "full"] = "normal"
    #: Tries per turn before it is moved to the dead letters.
    max_attempts: int = Field(default=5, ge=1, le=100)
    #: Retry backoff: ``retry_base_s * 2**(attempt - 1)``, at most ``retry_max_s``,
    #: shortened by up to ``retry_jitter`` of itself at random.
    retry_base_s: float = Field(default=0.5, gt=0)
    #: Longest retry delay, seconds.
    retry_max_s: float = Field(default=60.0, gt=0)
    #: Share of a retry delay removed at random.
    retry_jitter: Fraction = 0.2
    #: Seconds an idle worker waits before looking for due retries (new turns wake
    #: the workers at once).
    poll_interval_s: float = Field(default=0.2, gt=0, le=10)
    #: Finished turns kept in the journal (metadata only: their text is dropped).
    keep_done: int = Field(default=10_000, ge=0)
    #: Write turns in a process of their own: ``serve`` supervises, beside each
    #: sidecar worker, a writer that claims the turns that worker journals and runs
    #: extraction, judging and storing there, so they no longer compete with the next
    #: requests for the worker's event loop and interpreter lock. What a writer
    #: stores reaches the workers' corpus caches at once (the cache relay). Worth it
    #: where the host has idle cores; writer *i*'s ``/metrics`` are on
    #: ``admin.port + server.workers + 1 + i``.
    own_process: bool = False

    @field_validator("journal_path")
    @classmethod
    def _check_journal_path(cls, value: str) -> str:
        if not value.strip() or value.strip() == ":memory:" or value.startswith("file:"):
            raise ValueError("journal_path must be a file path (an in-memory journal is lost)")
        return value

    @model_validator(mode="after")
    def _check_backoff(self) -> WriteQueueConfig:
        if self.retry_max_s < self.retry_base_s:
            raise ValueError("retry_max_s must be at least retry_base_s")
        return self


class ExtractionConfig(_Model):
    #: Extract and store facts from this route's turns.
    enabled: bool = True
    #: Use the configured LLM (heuristic fallback when it is absent or fails).
    use_llm: bool = True
    #: Most facts stored from one turn.
    max_facts_per_turn: int = Field(default=10, ge=1, le=100)
    #: A fact at least this similar (cosine) to one the user has is a duplicate.
    duplicate_threshold: float = Field(default=0.92, ge=0.5, le=1.0)
    #: Gray zone, without an LLM judge: at least this similar and no new names or
    #: numbers is a paraphrase (with all-MiniLM-L6-v2, paraphrases of one fact score
    #: above it, contradicting values of one slot below).
    paraphrase_threshold: float = Field(default=0.8, ge=0.3, le=1.0)
    #: Below this similarity a stored memory is never a dedup candidate; above it,
    #: the same slot with another name/number is a contradiction (supersede).
    contradiction_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    #: Stored memories compared with each new fact.
    dedup_candidates: int = Field(default=5, ge=1, le=50)
    #: A fact no slot rule places falls in the attribute whose questions it is
    #: nearest (cosine, all-MiniLM-L6-v2 scale) when at least this near...
    placement_min_score: float = Field(default=0.4, ge=0.0, le=1.0)
    #: ...and this much nearer than the next attribute's; a change it tells then
    #: supersedes the owner's memory of that attribute (write/turns/placement.py).
    placement_margin: float = Field(default=0.05, ge=0.0, le=1.0)
    #: The owner's memories most like a change that are read for the one it
    #: supersedes; 0: changes supersede by the slot rules alone.
    placement_candidates: int = Field(default=30, ge=0, le=1000)
    #: Longest user/assistant text sent to extraction, in characters each.
    max_turn_chars: int = Field(default=6000, ge=100)
    #: A turn the extractor keeps no fact from still leaves the user's first-person
    #: statements, quoted ('User said: "…"'): what the user said about themselves is
    #: never dropped silently (docs/design/provenance.md).
    keep_statements: bool = True
    #: A request the assistant answered at length, with no statement of the user's,
    #: leaves 'User asked: "…"' with the answer's head as its excerpt, so "what did
    #: you recommend last time?" can be answered.
    keep_answers: bool = True
    #: The shortest answer (characters) an "asked" memory is kept for.
    answer_min_chars: int = Field(default=300, ge=0)


class EnrichmentConfig(_Model):
    """What the write path (and ``sidecar eval``'s ingestion) adds to every memory."""

    #: Persist a link to existing memories of the same owner at least this similar
    #: (cosine), in both directions. Lower thresholds link near-topic memories that
    #: crowd out better hits (docs/design/retrieval-scoring.md).
    link_threshold: float = Field(default=0.8, ge=0, le=1)
    #: Most similarity links a new memory gets (0 = none).
    max_links: int = Field(default=8, ge=0, le=32)
    #: Most entity links a new memory gets (0 = none): links to the owner's memories
    #: that name the same person, place or thing ("User's sister is Ana." and "Ana
    #: lives in Porto."), the most similar first, in both directions. Link expansion
    #: follows them from a hit to the facts about what it names
    #: (docs/design/entity-links.md).
    max_entity_links: int = Field(default=4, ge=0, le=32)
    #: A name more of the owner's memories carry than this share (and at least
    #: ``entity_min_holders``) tells nothing about which memory is about it (a
    #: speaker's name in a transcript): no links are made on it.
    entity_max_share: float = Field(default=0.05, gt=0, le=1)
    #: Any name carried by at most this many of the owner's memories may link them.
    entity_min_holders: int = Field(default=8, ge=2, le=1000)
    #: L0 abstract length (characters).
    abstract_chars: int = Field(default=120, ge=20, le=1000)
    #: L1 overview length (characters).
    overview_chars: int = Field(default=600, ge=50, le=4000)


class TaxonomyTopic(_Model):
    """A topic of the taxonomy (``hierarchy.taxonomy.topics``)."""

    #: What the topic covers, in a line: a fact is compared with its embedding.
    description: str = Field(min_length=1, max_length=400)
    #: Words that file a fact under the topic (compared as stemmed tokens).
    keywords: list[str] = Field(default_factory=list, max_length=200)


class TaxonomyConfig(_Model):
    """Topics the write path files a fact under when no LLM named one
    (``sidecar.memory.write.tree.taxonomy``): a small built-in taxonomy (health, family,
    relationships, work, education, food, travel, home, money, hobbies, pets,
    technology, preferences, schedule), by keywords and by the fact's similarity to
    each topic's description. A fact that fits none is filed as before (nearest
    category, else "general")."""

    #: File facts under taxonomy topics when the extraction gave none.
    enabled: bool = True
    #: Least score a topic needs: the fact's cosine to the description, plus
    #: ``keyword_bonus`` when one of its keywords is among the fact's words.
    min_score: float = Field(default=0.45, ge=-1, le=2)
    #: What a keyword hit adds to a topic's score.
    keyword_bonus: float = Field(default=0.25, ge=0, le=1)
    #: Topics added to the built-in ones, or replacing one of the same name.
    topics: dict[str, TaxonomyTopic] = Field(default_factory=dict)
    #: Built-in topics left out (by name).
    without: list[str] = Field(default_factory=list)


class HierarchyBuildConfig(HierarchyBuildExperiments):
    """The per-user category tree the write path builds (``sidecar.memory.write.tree.hierarchy``).

    New memories are filed under the owner's nearest leaf category (or a "general"
    one); ``evolve`` splits big categories into named subcategories, merges
    near-identical ones and refreshes every category's summary and embedding.
    """

    #: Build and maintain each user's category tree on the write path.
    enabled: bool = True
    #: A new memory joins the owner's nearest leaf category when its cosine to that
    #: category's centroid is at least this, else the owner's "general" category
    #: (with all-MiniLM-L6-v2, a memory is typically above it for its own topic's
    #: centroid and below it for the nearest other one).
    assign_threshold: float = Field(default=0.5, ge=-1, le=1)
    #: A leaf category with at least this many memories is split by ``evolve``.
    split_min: int = Field(default=12, ge=4, le=10_000)
    #: Clusters smaller than this are merged into their nearest sibling.
    min_size: int = Field(default=3, ge=1, le=1_000)
    #: Most subcategories one split creates (KMeans k is chosen in 2..this by
    #: silhouette).
    max_children: int = Field(default=8, ge=2, le=64)
    #: Sibling leaf categories (and clusters of one split) whose centroids are at
    #: least this similar are merged.
    merge_threshold: float = Field(default=0.9, ge=0, le=1)
    #: Seconds between scheduled ``evolve`` passes over owners with new memories
    #: (0 = no schedule; ``evolve`` then runs only on demand).
    schedule_s: float = Field(default=300.0, ge=0)
    #: Owners evolved per scheduled pass at most (the rest wait for the next one).
    max_owners_per_tick: int = Field(default=16, ge=1, le=10_000)
    #: Keywords in a category's name, and in its summary's "Covers:" list.
    name_keywords: int = Field(default=3, ge=1, le=10)
    #: Keywords in a category summary's "Covers:" list.
    summary_keywords: int = Field(default=8, ge=1, le=50)
    #: Central members quoted in a category's summary.
    examples: int = Field(default=3, ge=0, le=10)
    #: Topics for facts no LLM gave one.
    taxonomy: TaxonomyConfig = TaxonomyConfig()

    @model_validator(mode="after")
    def _check_sizes(self) -> HierarchyBuildConfig:
        if self.split_min < 2 * self.min_size:
            raise ValueError("split_min must be at least 2 * min_size (a split needs two)")
        return self


class RetentionConfig(_Model):
    """The per-user memory cap and what is given up first
    (``sidecar.memory.write.upkeep.retention``), and the retrieval access counts that
    feed it.

    Retention score (higher is kept longer), weights renormalised to sum 1::

        importance_weight * importance
      + access_weight     * min(1, log1p(access_count) / log1p(access_saturation))
      + recency_weight    * 0.5 ** (age_days / recency_half_life_days)

    where the age runs from the memory's last use: the later of ``accessed_at``
    (its last injection) and ``updated_at`` (its last content change).
    """

    #: Most active memories one user keeps; beyond it the lowest-scoring ones are
    #: archived (or deleted, see ``action``). Constraints go last.
    max_memories_per_user: int = Field(default=10_000, ge=1)
    #: ``archive``: the memory gets status ``archived`` and leaves retrieval, its row
    #: stays (restorable; other replicas see the change within ``cache.ttl_s``);
    #: ``delete``: the row is removed for good.
    action: Literal["archive", "delete"] = "archive"
    #: Seconds between scheduled passes over the users written for since the last
    #: pass (0 = no schedule: pruning runs only on demand).
    prune_interval_s: float = Field(default=3600.0, ge=0)
    #: Users checked per scheduled pass at most, those with the most writes first
    #: (the rest wait for the next pass). A check below the cap is one count query.
    max_owners_per_tick: int = Field(default=1000, ge=1, le=100_000)
    #: Weight of the memory's importance (0..1, set at extraction) in the score.
    importance_weight: float = Field(default=0.4, ge=0)
    #: Weight of how often the memory was injected (log-scaled access count).
    access_weight: float = Field(default=0.3, ge=0)
    #: Weight of how recently it was used (injected or changed), decaying by half
    #: every ``recency_half_life_days``.
    recency_weight: float = Field(default=0.3, ge=0)
    #: Days after which the recency term has halved.
    recency_half_life_days: float = Field(default=30.0, gt=0)
    #: Access count at which the access term reaches 1.
    access_saturation: int = Field(default=100, ge=1)
    #: Record which memories the request path injects (access_count, accessed_at).
    track_access: bool = True
    #: Seconds between background flushes of the recorded accesses to the store.
    access_flush_s: float = Field(default=30.0, gt=0)
    #: Distinct memories with unflushed accesses held at most; beyond it new ones
    #: are dropped (counted) until the next flush.
    access_max_pending: int = Field(default=100_000, ge=1)

    @model_validator(mode="after")
    def _some_weight(self) -> RetentionConfig:
        if self.importance_weight + self.access_weight + self.recency_weight <= 0:
            raise ValueError("at least one retention weight must be positive")
        return self


class ConsolidationConfig(_Model):
    """Merging a user's memories that state the same fact
    (``sidecar.memory.write.upkeep.consolidation``): on a schedule for the users written for
    since the last pass, and on demand (``sidecar memories consolidate``, the admin
    API). The richest wording is kept; the others become ``merged`` rows that point
    at it (its history). Never across users, never two facts that differ in a name,
    number, polarity or value."""

    #: Run the scheduled passes (on demand it always runs).
    enabled: bool = True
    #: Seconds between scheduled passes (0: on demand only).
    interval_s: float = Field(default=600.0, ge=0)
    #: Users consolidated per scheduled pass at most, those with the most writes first.
    max_owners_per_tick: int = Field(default=200, ge=1, le=100_000)
    #: A memory at least this similar (cosine) to a richer one of the same user, that
    #: shares a name, number or two content words with it and is no near miss of it,
    #: is folded into it when it says little more (0: only the same fact in other
    #: words is folded).
    restate_cosine: float = Field(default=0.5, ge=0, le=1)
    #: The most of a folded memory's content words that the kept one may lack.
    restate_novelty: float = Field(default=0.75, ge=0, le=1)
    #: Users with more distinct memories than this are not searched for restatements
    #: (the pass compares every pair); the same fact in other words is still folded.
    restate_max_memories: int = Field(default=3000, ge=0, le=1_000_000)
