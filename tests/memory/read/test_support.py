"""Every injected line has evidence of its own or a named bridge to one that has
(issue O, item 3): a memory that ranked only through a link is withheld unless it
names someone or something a line found on its own evidence names."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sidecar.config import RetrievalConfig
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.read.pipeline import MemoryRequest
from sidecar.memory.read.support import unsupported, with_support
from sidecar.memory.records.records import Hit, MemoryRecord, Scope
from sidecar.memory.records.turns import Turn
from sidecar.runtime.components import Components
from tests.support.boot import sidecar_config


def hit(text: str, via: str = "direct", cosine: float = 0.5, lexical: float = 0.0) -> Hit:
    record = MemoryRecord(id=text[:32], user_id="ana", content=text)
    return Hit(record, 1.0, {"cosine": cosine, "lexical": lexical}, via)


def test_a_linked_memory_without_a_named_bridge_is_withheld() -> None:
    home = hit("User lives in Porto.")
    diet = hit("User is vegetarian.", via="link", cosine=0.06)
    withheld: list[Hit] = []
    assert list(with_support([home, diet], withheld, 5)) == [home]
    assert withheld == [diet]


def test_a_named_bridge_is_injected_and_says_so() -> None:
    father = hit("User's father is Piotr.")
    retired = hit("Piotr retired from teaching maths.", via="link", cosine=0.1)
    kept = list(with_support([retired, father], [], 5))
    assert [h.record.content for h in kept] == [retired.record.content, father.record.content]
    assert kept[0].via == "bridge: Piotr"


def test_the_bridge_must_be_to_a_line_injected_beside_it() -> None:
    lines = [hit(f"User likes fact number {n}.") for n in range(5)]
    far = hit("User's father is Piotr.")  # found on its own, but sixth
    retired = hit("Piotr retired from teaching maths.", via="link", cosine=0.1)
    withheld: list[Hit] = []
    kept = list(with_support([*lines, retired, far], withheld, 5))
    assert retired not in kept
    assert withheld == [retired]


def test_a_bridge_to_a_line_pushed_out_by_other_bridges_is_withheld() -> None:
    # The father is among the five best found on their own evidence, but a bridge
    # about Ana ranks above him: the block's five lines end before him, and "Piotr
    # retired" would name someone the model never sees.
    sister = hit("User's sister is Ana.")
    lines = [sister, *(hit(f"User likes fact number {n}.") for n in range(2))]
    porto = hit("Ana moved to Porto last spring.", via="link", cosine=0.1)
    retired = hit("Piotr retired from teaching maths.", via="link", cosine=0.1)
    father = hit("User's father is Piotr.")
    withheld: list[Hit] = []
    kept = list(with_support([*lines, porto, retired, father], withheld, 5))
    assert withheld == [retired]
    assert kept[:5] == [*lines, replace(porto, via="bridge: Ana"), father]
    assert unsupported(kept[:5], RetrievalConfig()) == 0


def test_unsupported_counts_from_the_signals_alone() -> None:
    gate = RetrievalConfig(threshold=0.2, lexical_threshold=0.15)
    assert unsupported([hit("User lives in Porto."), hit("User is vegan.", cosine=0.1)], gate) == 1
    lexical = hit("User is vegan.", cosine=0.05, lexical=0.4)
    assert unsupported([lexical], gate) == 0
    bridged = [hit("User's father is Piotr."), hit("Piotr retired.", via="link", cosine=0.0)]
    assert unsupported(bridged, gate) == 0
    # Half of each gate at once is evidence too (the request path's own rule)...
    both = hit("User is vegan.", cosine=0.12, lexical=0.09)
    assert unsupported([both], gate) == 0
    # ...unless the joint rule is off.
    assert unsupported([both], gate.model_copy(update={"joint_gate": 1.0})) == 1


async def test_a_session_neighbour_off_the_question_is_not_injected(
    tmp_path: Path, embedder: Embedder
) -> None:
    config = sidecar_config(tmp_path, hierarchy={"schedule_s": 0})
    components = await Components.build(config, embedder=embedder)
    try:
        at = 1_700_000_000_000
        for n, text in enumerate(["I'm vegetarian.", "I live in Porto."]):
            turn = Turn(
                user_id="ana", user_text=text, assistant_text="Noted.",
                created_at=at + n, session_id="s1",
            )  # fmt: skip
            await components.write.writer.write_turn(turn)
        request = MemoryRequest(
            text="Where do I live?", history=(), scope=Scope("ana"), profile=config.defaults
        )
        outcome = await components.read.pipeline.run(request)
        assert [h.record.content for h in outcome.block.hits] == ["User lives in Porto."]
        assert "vegetarian" not in outcome.block.text
    finally:
        await components.close()
