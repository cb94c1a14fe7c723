"""The corpus-scored strategies on hand-built corpora: fusion, the evidence gate,
link expansion and its share limit, associative hops, composite re-rank."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from sidecar.config import LinkConfig, RetrievalConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.links import expand_links
from sidecar.memory.read.retrieval.pipeline import PipelineRetriever
from sidecar.memory.read.retrieval.registry import build_retrievers
from sidecar.memory.read.retrieval.signals import Scores, Signals, evidence_mask, rounded
from sidecar.memory.records.records import MemoryRecord, Status
from sidecar.memory.records.vectors import top_indices
from tests.support.vectors import unit

DIM = 4


def rec(
    rid: str,
    content: str,
    vector: tuple[float, ...],
    *,
    session: str = "",
    at: int = 0,
    related: tuple[str, ...] = (),
    **extra: object,
) -> MemoryRecord:
    return MemoryRecord(
        id=rid,
        user_id="u",
        content=content,
        embedding=vector,
        session_id=session,
        created_at=at,
        related_ids=related,
        **extra,  # type: ignore[arg-type]
    )


def query(text: str, *values: float) -> Query:
    return Query(text, np.asarray(unit(*values), dtype=np.float32))


def config(**changes: object) -> RetrievalConfig:
    return RetrievalConfig().model_copy(update=changes)


def ranked_ids(name: str, corpus: Corpus, q: Query, cfg: RetrievalConfig, k: int = 5) -> list[str]:
    retriever = build_retrievers()[name]
    assert isinstance(retriever, PipelineRetriever)
    ranking = retriever.rank(q, corpus, cfg, k)
    return [corpus.records[i].id for i in ranking.order[:k]]


CORPUS = Corpus.build(
    [
        rec("a", "User adopted a greyhound called Juniper.", unit(1, 0, 0, 0), at=1),
        rec("b", "User works night shifts at the hospital.", unit(0, 1, 0, 0), at=2),
        rec("c", "Juniper the greyhound loves the beach.", unit(0.2, 0, 1, 0), at=3),
        rec("d", "User's favourite meal is ramen.", unit(0, 0, 0, 1), at=4),
        rec("x", "an old note", unit(1, 0, 0, 0), at=5, status=Status.SUPERSEDED),
    ],
    DIM,
)


def test_superseded_memories_are_not_in_the_corpus() -> None:
    assert "x" not in CORPUS.index_of
    assert CORPUS.size == 4


def test_dense_orders_by_cosine_and_gates_on_it() -> None:
    q = query("dog", 1, 0, 0.1, 0)
    assert ranked_ids("dense", CORPUS, q, config())[:2] == ["a", "c"]
    assert ranked_ids("dense", CORPUS, q, config(threshold=0.99)) == ["a"]


def test_bm25_finds_words_the_vectors_miss() -> None:
    q = query("what does Juniper love", 0, 0, 0, 1)  # the vector points at "ramen"
    assert ranked_ids("bm25", CORPUS, q, config())[0] == "c"
    assert ranked_ids("dense", CORPUS, q, config())[0] == "d"
    assert ranked_ids("hybrid", CORPUS, q, config())[:2] in (["c", "d"], ["d", "c"])


def test_evidence_gate_drops_memories_without_evidence() -> None:
    q = query("Juniper", 0, 0, 1, 0)
    cfg = config(threshold=0.9, lexical_threshold=0.3)
    ids = ranked_ids("hybrid", CORPUS, q, cfg)
    assert set(ids) == {"a", "c"}  # c by cosine, a and c by the word


def test_two_weak_signals_together_are_evidence() -> None:
    # A fact told in passing in a long message ("...can you help with the bake sale?
    # By the way, I just finished a 5K in 35 minutes.") shares few of its words and
    # little of its meaning with "How fast did I run my 5K?": each signal is under its
    # gate, both at over half of it.
    cosine = np.array([0.25, 0.12, 0.12, 0.05, 0.09, 0.10], dtype=np.float32)
    lexical = np.array([0.00, 0.09, 0.05, 0.16, 0.14, 0.075], dtype=np.float32)
    nothing = np.zeros(cosine.size, dtype=np.float32)
    signals = Signals(cosine, nothing, lexical, nothing)
    gate = config(threshold=0.2, lexical_threshold=0.15)
    assert evidence_mask(signals, gate).tolist() == [True, True, False, True, False, True]
    single = gate.model_copy(update={"joint_gate": 1.0})
    assert evidence_mask(signals, single).tolist() == [True, False, False, True, False, False]
    # The gate off is off for both rules.
    assert evidence_mask(signals, config(threshold=-1.0, lexical_threshold=0.0)).all()


def test_rrf_and_weighted_fusion_are_both_deterministic() -> None:
    q = query("greyhound beach", 0.5, 0, 0.5, 0)
    for name in ("hybrid", "hybrid-rrf", "default"):
        first = ranked_ids(name, CORPUS, q, config())
        assert first == ranked_ids(name, CORPUS, q, config())


def linked_corpus() -> Corpus:
    return Corpus.build(
        [
            rec("q1", "Caroline asked where Melanie went.", unit(1, 0, 0, 0), session="s1", at=1),
            rec("a1", "I went camping by the lake.", unit(0, 1, 0, 0), session="s1", at=2),
            rec("z1", "Unrelated chat about weather.", unit(0, 0, 1, 0), session="s2", at=3),
            rec("z2", "More unrelated chat.", unit(0, 0, 0.9, 0.1), session="s2", at=4),
            rec("p1", "Painting class on Tuesday.", unit(0, 0, 0, 1), at=5, related=("q1",)),
        ],
        DIM,
    )


def with_session_neighbours(cfg: RetrievalConfig) -> RetrievalConfig:
    return cfg.model_copy(
        update={"links": cfg.links.model_copy(update={"session_neighbors": True})}
    )


def test_session_neighbours_and_persisted_links_are_followed() -> None:
    corpus = linked_corpus()
    q = query("where did Melanie go", 1, 0, 0, 0)
    gated = config(threshold=0.5, lexical_threshold=0.9)
    plain = ranked_ids("hybrid", corpus, q, gated)
    assert plain == ["q1"]
    linked = ranked_ids("linked", corpus, q, with_session_neighbours(gated))
    assert linked[0] == "q1"
    assert set(linked[1:3]) == {"a1", "p1"}  # session neighbour and persisted link
    # The default: persisted links only (the conversation context carries sessions).
    assert ranked_ids("linked", corpus, q, gated) == ["q1", "p1"]


def reference_neighbours(corpus: Corpus, index: int, cfg: LinkConfig) -> list[int]:
    found = list(corpus.links[index])
    if cfg.session_neighbors:
        for other in (int(corpus.session_prev[index]), int(corpus.session_next[index])):
            if other >= 0 and other not in found:
                found.append(other)
    return found


def reference_expand_links(
    corpus: Corpus, direct: Scores, cfg: LinkConfig, pool: int, evidence: npt.NDArray[np.bool_]
) -> tuple[Scores, dict[int, str]]:
    """The link formula one link at a time, in NumPy scalars of the scores' dtype."""
    final = direct.copy()
    via: dict[int, str] = {}
    for referrer in top_indices(direct, pool, evidence):
        reach = float(direct[referrer])
        degree = len(reference_neighbours(corpus, referrer, cfg))
        spread = cfg.hub_links / degree if cfg.hub_links and degree > cfg.hub_links else 1.0
        frontier, seen = [referrer], {referrer}
        for hop in range(1, cfg.max_link_depth + 1):
            decay = cfg.hop_decay ** (hop - 1)
            following: list[int] = []
            for node in frontier:
                for other in reference_neighbours(corpus, node, cfg):
                    if other not in seen:
                        seen.add(other)
                        following.append(other)
                        share = cfg.blend * reach * spread if spread < 1 else cfg.blend * reach
                        linked = decay * (share + (1 - cfg.blend) * direct[other])
                        final[other] = max(final[other], np.float32(linked))
                        via.setdefault(other, "link")
            frontier = following
    return final, via


@pytest.mark.parametrize("seed", range(120))
def test_link_expansion_matches_the_formula_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 120))
    ids = [f"m{i}" for i in range(size)]
    rows = [
        rec(
            ids[i],
            f"memory {i}",
            unit(*rng.random(DIM) + 0.01),
            session=f"s{rng.integers(0, 4)}" if rng.random() < 0.8 else "",
            at=int(rng.integers(0, 1000)),
            related=tuple(
                rng.choice(ids, size=int(rng.integers(0, min(5, size + 1))), replace=False)
            ),
        )
        for i in range(size)
    ]
    corpus = Corpus.build(rows, DIM)
    direct = rng.random(corpus.size).astype(np.float32)
    evidence = rng.random(corpus.size) < 0.6
    cfg = LinkConfig(
        max_link_depth=int(rng.integers(1, 4)),
        blend=float(rng.random()),
        hop_decay=float(rng.uniform(0.05, 1)),
        session_neighbors=bool(rng.random() < 0.5),
        hub_links=int(rng.integers(0, 6)),
    )
    pool = int(rng.integers(1, 30))
    final, via = expand_links(corpus, direct, cfg, pool, evidence)
    expected, expected_via = reference_expand_links(corpus, direct, cfg, pool, evidence)
    assert final.dtype == np.float32
    assert final.tobytes() == expected.tobytes()
    assert via == expected_via  # which memories came through a link (order is no contract)


def test_linked_memories_never_take_more_than_their_share() -> None:
    corpus = linked_corpus()
    q = query("where did Melanie go", 1, 0, 0, 0)
    cfg = with_session_neighbours(config(threshold=-1.0, lexical_threshold=0.0))
    share = cfg.links.model_copy(update={"max_share": 0.0, "blend": 1.0})
    ids = ranked_ids("linked", corpus, q, cfg.model_copy(update={"links": share}), k=2)
    direct = ranked_ids("hybrid", corpus, q, cfg, k=2)
    assert ids == direct


def test_associative_off_is_identical_and_on_is_deterministic_and_bounded() -> None:
    vectors = [unit(1, 0, 0, 0), unit(0.9, 0.44, 0, 0), unit(0.6, 0.8, 0, 0), unit(0.2, 0.98, 0, 0)]
    corpus = Corpus.build(
        [rec(f"m{i}", f"memory number {i}", v, at=i) for i, v in enumerate(vectors)], DIM
    )
    q = query("start", 1, 0, 0, 0)
    cfg = config(threshold=0.95, lexical_threshold=1.0)
    base = build_retrievers()["default"]
    assert isinstance(base, PipelineRetriever)
    off = base.rank(q, corpus, cfg, 4)
    assert [corpus.records[i].id for i in off.order] == ["m0"]
    assoc = ranked_ids("associative", corpus, q, cfg, k=4)
    assert assoc[0] == "m0"
    assert "m1" in assoc  # cos(m0, m1) >= 0.72
    assert "m2" in assoc  # one hop further
    assert assoc == ranked_ids("associative", corpus, q, cfg, k=4)
    one_hop = cfg.associative.model_copy(update={"hop_limit": 1, "max_visits": 2})
    bounded = ranked_ids("associative", corpus, q, cfg.model_copy(update={"associative": one_hop}))
    assert "m3" not in bounded


@pytest.mark.parametrize("field", ["importance", "confidence"])
def test_rerank_prefers_salient_memories_among_equally_relevant_ones(field: str) -> None:
    corpus = Corpus.build(
        [
            rec("low", "User likes tea.", unit(1, 0, 0, 0), at=1, **{field: 0.1}),
            rec("high", "User likes tea!", unit(1, 0, 0, 0), at=2, **{field: 1.0}),
        ],
        DIM,
    )
    q = query("tea", 1, 0, 0, 0)
    assert ranked_ids("default", corpus, q, config())[0] == "high"
    off = config().rerank.model_copy(update={"enabled": False})
    assert ranked_ids("default", corpus, q, config(rerank=off))[0] == "low"  # index order


def bridge_corpus() -> Corpus:
    return Corpus.build(
        [
            rec("bridge", "User's father is Piotr.", unit(1, 0, 0, 0), at=0, related=("target",)),
            rec("target", "Piotr retired from teaching maths.", unit(0, 1, 0, 0), at=1),
            rec("wen", "Wen retired from teaching maths.", unit(0, 1, 0.1, 0), at=2),
            rec("ken", "Ken retired from teaching maths.", unit(0, 1, 0.2, 0), at=3),
            rec("tea", "User likes tea.", unit(0, 0, 1, 0), at=4, related=("green",)),
            rec("green", "User likes green tea.", unit(0, 0, 1, 0.1), at=5),
        ],
        DIM,
    )


def test_a_bridge_and_the_fact_it_names_rise_together_above_look_alikes() -> None:
    corpus = bridge_corpus()
    direct = np.asarray([0.5, 0.9, 0.9, 0.88, 0.8, 0.6], dtype=np.float32)
    evidence = np.ones(corpus.size, dtype=bool)
    cfg = LinkConfig(support=1.0)
    final, _ = expand_links(corpus, direct, cfg, 10, evidence)
    order = [corpus.records[i].id for i in np.argsort(-final, kind="stable")]
    assert order[:2] == ["bridge", "target"]  # each 0.5 + 0.9
    # Two facts about the user lift each other only as linked memories always did.
    assert final[5] == pytest.approx(max(0.6, cfg.blend * 0.8 + (1 - cfg.blend) * 0.6))
    # Without support the bridge stays below the look-alikes.
    plain, _ = expand_links(corpus, direct, LinkConfig(support=0.0), 10, evidence)
    assert plain[0] < plain[3]
    assert plain[1] == direct[1]


def test_support_needs_evidence_of_the_memorys_own() -> None:
    corpus = bridge_corpus()
    direct = np.asarray([0.5, 0.9, 0.9, 0.88, 0.8, 0.6], dtype=np.float32)
    evidence = np.asarray([False, True, True, True, True, True])
    final, _ = expand_links(corpus, direct, LinkConfig(support=1.0), 10, evidence)
    assert final[0] < final[3]  # the bridge is off the question: no support


def test_two_facts_that_both_speak_of_the_user_are_no_bridge() -> None:
    # The heuristic extractor keeps a sentence's opening words ("In Rome, User …",
    # "Speaking of weddings, User's friend …"): such a fact is still about the user,
    # and a link between two facts about the user lifts only as links always did.
    corpus = Corpus.build(
        [
            rec("trip", "User plans a trip to Rome.", unit(1, 0, 0, 0), at=0, related=("rome",)),
            rec("rome", "In Rome, User wants to see the Pantheon.", unit(0, 1, 0, 0), at=1),
            rec("other", "User visited the Louvre in Paris.", unit(0, 1, 0.1, 0), at=2),
        ],
        DIM,
    )
    direct = np.asarray([0.9, 0.5, 0.6], dtype=np.float32)
    evidence = np.ones(corpus.size, dtype=bool)
    cfg = LinkConfig(support=1.0)
    final, _ = expand_links(corpus, direct, cfg, 10, evidence)
    blended = cfg.blend * 0.9 + (1 - cfg.blend) * 0.5
    assert final[1] == pytest.approx(max(0.5, blended))  # blended, no support
    assert final[1] < 0.9 + 0.5


def test_links_are_not_followed_from_or_to_a_long_transcript_line() -> None:
    """A long transcript line (an assistant's answer) is neither a referrer nor
    reached through a link; short lines and facts are linked as before."""
    answer = "assistant: " + " ".join(f"option{i} idea" for i in range(40))
    corpus = Corpus.build(
        [
            rec("u1", "user: where should I travel in May?", unit(1, 0, 0, 0), session="s", at=1),
            rec("a1", answer, unit(0, 1, 0, 0), session="s", at=2),
            rec("u2", "user: I booked Lisbon.", unit(0, 0, 1, 0), session="s", at=3),
            rec("f1", "User likes warm places.", unit(0, 0, 0, 1), at=4, related=("u1",)),
            rec("f2", "User speaks Portuguese.", unit(0, 0, 0, 1), at=5, related=("a1",)),
        ],
        DIM,
    )
    at = corpus.index_of
    direct = np.asarray([0.9, 0.1, 0.1, 0.1, 0.1], dtype=np.float32)
    evidence = np.asarray([True, False, False, False, False])
    unlimited = LinkConfig(long_lines=0, session_neighbors=True)
    limited = LinkConfig(long_lines=64, session_neighbors=True)
    _, via = expand_links(corpus, direct, unlimited, 5, evidence)
    assert {at["a1"], at["f1"]} <= set(via)  # session neighbour and persisted link
    _, via = expand_links(corpus, direct, limited, 5, evidence)
    assert set(via) == {at["f1"]}  # the long answer is not reached
    # Nor does the long answer, strong as it may be, lift what it links to.
    direct = np.asarray([0.1, 0.9, 0.1, 0.1, 0.1], dtype=np.float32)
    evidence = np.asarray([False, True, False, False, False])
    final, via = expand_links(corpus, direct, limited, 5, evidence)
    assert via == {}
    assert np.array_equal(final, direct)


def test_a_hub_splits_its_lift_among_its_neighbours() -> None:
    """A referrer linked to more memories than ``hub_links`` (boilerplate that many
    share) lifts each by its share of ``blend * referrer``: its look-alikes stay
    under a direct hit that outranks them on their own; a referrer with few links
    lifts its neighbours in full, as before."""
    hub_links = [f"h{i}" for i in range(8)]
    corpus = Corpus.build(
        [
            rec(
                "hub",
                "package anthropic import bytes context json",
                unit(1, 0, 0, 0),
                related=tuple(hub_links),
            ),
            *[
                rec(h, f"package p{i} import bytes context json", unit(0, 1, 0, 0))
                for i, h in enumerate(hub_links)
            ],
            rec("answer", "package openai: the vector store client", unit(0, 0, 1, 0)),
            rec("pair", "the openai client's retry policy", unit(0, 0, 0, 1), related=("f1",)),
            rec("f1", "files are uploaded in parts", unit(0, 0, 0, 1)),
        ],
        DIM,
    )
    at = corpus.index_of
    direct = np.zeros(corpus.size, dtype=np.float32)
    direct[at["hub"]] = 0.93
    direct[[at[h] for h in hub_links]] = 0.45
    direct[at["answer"]] = 0.60
    direct[at["pair"]] = 0.93
    direct[at["f1"]] = 0.45
    evidence = direct > 0.5
    cfg = LinkConfig(hub_links=4)
    final, _ = expand_links(corpus, direct, cfg, 10, evidence)
    full = np.float32(cfg.blend * 0.93) + np.float32(1 - cfg.blend) * np.float32(0.45)
    assert final[at["f1"]] == pytest.approx(full)  # one link: the whole lift
    split = cfg.blend * 0.93 * 4 / 8 + (1 - cfg.blend) * 0.45
    assert all(final[at[h]] == pytest.approx(split) for h in hub_links)
    assert max(final[at[h]] for h in hub_links) < final[at["answer"]]
    # Without the limit the hub's look-alikes pass the answer.
    unlimited, _ = expand_links(corpus, direct, LinkConfig(hub_links=0), 10, evidence)
    assert min(unlimited[at[h]] for h in hub_links) > unlimited[at["answer"]]


def test_evidence_is_rounded_as_round_rounds_it() -> None:
    """A hit's evidence rounds a float32 column in one numpy pass: the values are
    ``round(value, 6)``'s, bit for bit, halves (to even) and signs included; other
    dtypes take ``round`` itself."""
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [
            (rng.standard_normal(20_000) * scale).astype(np.float32)
            for scale in (1e-7, 1e-3, 1.0, 40.0, 1e5)
        ]
        # exact halves of the sixth decimal (0.0078125 = 7812.5e-6) and their kin
        + [np.array([j / 2**k for k in range(7, 12) for j in range(-99, 100, 2)], np.float32)]
    )
    every = list(range(len(values)))
    want = [round(v, 6) for v in values.tolist()]
    got = rounded(values, every)
    assert [repr(v) for v in got] == [repr(v) for v in want]
    doubles = values.astype(np.float64) / 3
    assert rounded(doubles, every) == [round(v, 6) for v in doubles.tolist()]
