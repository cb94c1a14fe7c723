"""The per-user log of explained injections: newest first, the profile's ``keep``,
the least recently injected users go first past ``max_users``, forgetting drops a
user's entries, and what an entry says of each memory."""

from __future__ import annotations

from sidecar.memory.read.injections import MAX_KEPT_CHARS, InjectionLog, explain
from sidecar.memory.records.records import Hit, MemoryRecord, Visibility


def record(rid: str, owner: str = "u1", visibility: Visibility = Visibility.USER) -> MemoryRecord:
    return MemoryRecord(id=rid, user_id=owner, content=f"memory {rid}", visibility=visibility)


def test_keeps_the_last_n_newest_first() -> None:
    log = InjectionLog(max_users=10)
    for n in range(5):
        log.record(
            "u1",
            explain(request_id=f"r{n}", at_ms=n, profile="p", query="q", rewritten=None, hits=()),
            keep=3,
        )
    assert [i.request_id for i in log.recent("u1")] == ["r4", "r3", "r2"]
    assert log.find("u1", "r3") is not None
    assert log.find("u1", "r0") is None
    assert log.find("u2", "r4") is None  # another user's request is not found


def test_keep_zero_keeps_nothing() -> None:
    log = InjectionLog(max_users=10)
    log.record(
        "u1",
        explain(request_id="r", at_ms=0, profile="p", query="q", rewritten=None, hits=()),
        keep=0,
    )
    assert log.recent("u1") == []
    assert len(log) == 0


def test_least_recently_injected_users_go_first() -> None:
    log = InjectionLog(max_users=2)
    for user in ("a", "b", "a", "c"):
        log.record(
            user,
            explain(request_id=user, at_ms=0, profile="p", query="q", rewritten=None, hits=()),
            keep=5,
        )
    assert log.recent("b") == []
    assert [i.request_id for i in log.recent("a")] == ["a", "a"]
    assert log.recent("c")


def test_forget_drops_a_users_entries() -> None:
    log = InjectionLog(max_users=10)
    for user in ("a", "b"):
        log.record(
            user,
            explain(request_id="r", at_ms=0, profile="p", query="secret", rewritten=None, hits=()),
            keep=5,
        )
    assert log.forget_user("a") == 1
    assert log.recent("a") == []
    assert log.recent("b")
    assert log.forget_user("a") == 0


def test_an_entry_says_whose_memory_how_it_was_found_and_its_signals() -> None:
    own = Hit(record("m1"), 0.8, {"cosine": 0.61, "bm25": 0.2}, via="direct")
    shared = Hit(record("m2", "boss", Visibility.GROUP), 0.5, {"support": 0.4}, via="link")
    kept = explain(
        request_id="r",
        at_ms=5,
        profile="p",
        query="q",
        rewritten="q2",
        hits=(own, shared),
        groups=("team",),
    )
    assert [(m.id, m.owner, m.visibility, m.via) for m in kept.memories] == [
        ("m1", "u1", "user", "direct"),
        ("m2", "boss", "group", "link"),
    ]
    assert dict(kept.memories[0].signals) == {"bm25": 0.2, "cosine": 0.61}
    assert kept.groups == ("team",)
    assert kept.rewritten == "q2"


def test_a_long_query_is_kept_cut() -> None:
    kept = explain(
        request_id="r", at_ms=0, profile="p", query="q" * 5000, rewritten="w" * 5000, hits=()
    )
    assert len(kept.query) == MAX_KEPT_CHARS
    assert kept.rewritten is not None
    assert len(kept.rewritten) == MAX_KEPT_CHARS


def test_a_shorter_keep_keeps_the_newest() -> None:
    """Two profiles keep different numbers of one user's injections: when the shorter
    one records, the newest entries stay (the oldest go)."""
    log = InjectionLog(max_users=10)
    for n in range(3):
        log.record(
            "u1",
            explain(request_id=f"r{n}", at_ms=n, profile="p", query="q", rewritten=None, hits=()),
            keep=5,
        )
    log.record(
        "u1",
        explain(request_id="r3", at_ms=3, profile="p", query="q", rewritten=None, hits=()),
        keep=2,
    )
    assert [i.request_id for i in log.recent("u1")] == ["r3", "r2"]
