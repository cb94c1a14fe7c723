"""What the evidence gate keeps out: every question asked again of a user whose
memories hold none of its answers (``sidecar eval --off-topic``).

A retrieval set scores what is found when the answer is there. The request path
also runs when it is not — a new subject, a question the user never told anything
about — and then every line it injects is noise in the prompt. Moving each question
to another user of the same set is a question with no answer in that user's
memories, in the set's own register (the same kind of corpus, the same kind of
question). It measures the gate and the block as the request path applies them:
how many of the moved questions get any line, and how many lines.

The other user is the next one in the set (by id, wrapping round) whose memories
include none of the question's relevant ones visible to them; the moved question
carries none of the asker's groups. Questions whose answers every user can read (a
public memory) are not asked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.evaluation.dataset import Dataset, EvalMemory, visible
from sidecar.memory.read.block import distinct_hits
from sidecar.memory.read.support import with_support
from sidecar.memory.records.records import Hit, MemoryRecord, Scope


@dataclass(frozen=True, slots=True)
class OffTopic:
    """One strategy's moved questions: how many, how many got lines, how many lines."""

    questions: int
    with_lines: int
    lines: int
    #: Returned memories the moved scope may not read (must be 0).
    violations: int

    @property
    def with_lines_share(self) -> float:
        return self.with_lines / self.questions if self.questions else 0.0

    @property
    def lines_per_question(self) -> float:
        return self.lines / self.questions if self.questions else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "with_lines": self.with_lines,
            "with_lines_share": self.with_lines_share,
            "lines": self.lines,
            "lines_per_question": self.lines_per_question,
            "visibility_violations": self.violations,
        }


def off_topic_scopes(data: Dataset) -> dict[str, Scope]:
    """Query id -> the scope it is asked again in: the next user (by id, wrapping)
    who can read none of its relevant memories, without the asker's groups."""
    memories = {m.id: m for m in data.memories}
    scopes: dict[str, Scope] = {}
    for query in data.queries:
        relevant = [memories[i] for i in query.relevant_ids if i in memories]
        for other in users_after(data.users, query.user_id):
            scope = Scope(other, ())
            if not any(_readable(m, scope) for m in relevant):
                scopes[query.id] = scope
                break
    return scopes


def users_after(users: Sequence[str], user: str) -> Iterator[str]:
    """The other users of ``users`` (sorted) after ``user``, wrapping round; none
    where ``user`` is not among them."""
    if user not in users:
        return
    start = users.index(user)
    for step in range(1, len(users)):
        yield users[(start + step) % len(users)]


def block_lines(hits: Sequence[Hit], top_k: int) -> list[Hit]:
    """The lines the block would inject for ``hits`` (ranked): the first ``top_k``
    distinct ones, linked memories without a named bridge withheld."""
    return distinct_hits(with_support(hits, [], top_k), top_k)


def allowed(hit: Hit, scope: Scope, memories: Mapping[str, EvalMemory]) -> bool:
    """The dataset's own visibility rule on the dataset's own fields (the record's for
    rows the dataset does not have, such as category nodes)."""
    return _readable(memories.get(hit.record.id) or hit.record, scope)


def tally(
    answers: Sequence[tuple[Scope, Sequence[Hit]]],
    top_k: int,
    memories: Mapping[str, EvalMemory],
) -> OffTopic:
    """The figures over moved questions' (scope, ranked hits)."""
    counts = [len(block_lines(hits, top_k)) for _, hits in answers]
    return OffTopic(
        questions=len(answers),
        with_lines=sum(1 for n in counts if n),
        lines=sum(counts),
        violations=sum(
            1 for scope, hits in answers for hit in hits if not allowed(hit, scope, memories)
        ),
    )


def _readable(row: EvalMemory | MemoryRecord, scope: Scope) -> bool:
    return visible(row.user_id, row.group_id, row.visibility, scope)
