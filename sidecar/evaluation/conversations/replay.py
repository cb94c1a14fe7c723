"""A retrieval dataset whose memories are conversation turns, read back as the
conversations they were: per user, sessions in date order, each user message with
the assistant reply that followed it as one turn, at the session's time.

A memory is a turn when its content starts ``user:`` or ``assistant:``
(docs/eval-conversations.md). An assistant message with no user message before it in
its session (an opening greeting) joins no turn and is counted; so is a user message
left empty.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sidecar.errors import InvalidInput
from sidecar.evaluation.dataset import Dataset, EvalMemory
from sidecar.memory.records.turns import Turn

#: Turns of one session are this far apart (epoch ms), from the session's time.
TURN_GAP_MS = 60_000
_ROLES = ("user:", "assistant:")


@dataclass(frozen=True, slots=True)
class ReplayTurn:
    """One user message and the reply that followed it, ready for the write path."""

    turn: Turn
    #: The dataset ids of the messages it joins (the user's first).
    ids: tuple[str, ...]


@dataclass(slots=True)
class Conversations:
    """Every user's turns in the order they are replayed."""

    turns: list[ReplayTurn] = field(default_factory=list)
    #: Assistant messages that joined no turn (no user message before them).
    orphan_replies: int = 0

    @property
    def user_turns(self) -> int:
        return len(self.turns)


def _role(memory: EvalMemory) -> tuple[str, str]:
    text = memory.content
    for prefix in _ROLES:
        if text.startswith(prefix):
            return prefix[:-1], text[len(prefix) :].strip()
    raise InvalidInput(
        f"memory {memory.id!r} is not a conversation turn: its content must start "
        "'user:' or 'assistant:'"
    )


def conversations(dataset: Dataset, users: set[str] | None = None) -> Conversations:
    """The turns of ``users`` (default: all) in replay order: users one after the
    other, each user's sessions by date (then by first appearance), messages in
    dataset order within a session."""
    sessions: dict[str, dict[str, list[EvalMemory]]] = defaultdict(dict)
    for memory in dataset.memories:
        if users is not None and memory.user_id not in users:
            continue
        key = memory.session_id or f"{memory.user_id}:{memory.created_at}"
        sessions[memory.user_id].setdefault(key, []).append(memory)
    out = Conversations()
    for user in sorted(sessions):
        ordered = sorted(
            enumerate(sessions[user].items()), key=lambda item: (item[1][1][0].created_at, item[0])
        )
        for _, (session, messages) in ordered:
            _session_turns(user, session, messages, out)
    return out


def _session_turns(user: str, session: str, messages: list[EvalMemory], out: Conversations) -> None:
    start = messages[0].created_at
    pending: tuple[int, EvalMemory] | None = None  # the user message and its index
    replies: list[EvalMemory] = []

    def flush() -> None:
        if pending is None:
            return
        index, said = pending
        _, text = _role(said)
        answer = "\n\n".join(_role(r)[1] for r in replies)
        position = len(out.turns)
        turn = Turn(
            user_id=user,
            user_text=text,
            assistant_text=answer,
            created_at=start + index * TURN_GAP_MS,
            request_id=f"replay-{position}",
            session_id=session,
            message_index=index,
            refs=(said.id, *(r.id for r in replies)),
        )
        out.turns.append(ReplayTurn(turn, turn.refs))

    for index, memory in enumerate(messages):
        role, _ = _role(memory)
        if role == "user":
            flush()
            pending, replies = (index, memory), []
        elif pending is None:
            out.orphan_replies += 1
        else:
            replies.append(memory)
    flush()
