"""The query of a long message is its question, wherever the question is."""

from __future__ import annotations

from sidecar.memory.language.focus import focus_query


def document(chars: int) -> str:
    """Pasted text without a question: numbered clauses, paragraph by paragraph."""
    paragraphs, size, n = [], 0, 0
    while size < chars:
        n += 1
        paragraph = (
            f"Clause {n}. The tenant shall keep the premises in good repair and shall not "
            f"sublet any part of them without the landlord's written consent, clause {n}."
        )
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(paragraphs)


def test_a_short_message_is_its_own_query() -> None:
    assert focus_query("  Where do I live?  ", 2000) == "Where do I live?"


def test_the_question_after_a_pasted_document_is_the_query() -> None:
    question = "Given what I told you about my cat, can I keep her under this lease?"
    for size in (5_000, 300_000, 1 << 20):
        assert focus_query(f"{document(size)}\n\n{question}", 2000) == question


def test_a_short_instruction_after_the_document_counts_as_the_question() -> None:
    said = f"{document(20_000)}\n\nsummarise this for my landlord meeting on friday"
    assert focus_query(said, 2000) == "summarise this for my landlord meeting on friday"


def test_the_question_before_a_pasted_document_is_the_query() -> None:
    question = "Does anything in here clash with my allergy to cats?"
    assert focus_query(f"{question}\n\n{document(50_000)}", 2000) == question


def test_a_question_at_the_end_of_one_long_paragraph_is_found() -> None:
    said = document(30_000).replace("\n\n", " ") + " ok so which of these matter for my dog?"
    assert focus_query(said, 2000) == "ok so which of these matter for my dog?"


def test_without_any_question_head_and_tail_share_the_budget() -> None:
    text = "START " + "lorem ipsum dolor " * 5000 + " END"
    focused = focus_query(text, 400)
    assert len(focused) <= 400
    assert focused.startswith("START")
    assert focused.endswith("END")


def test_the_query_never_exceeds_the_budget() -> None:
    long_question = "why " * 1000 + "?"
    for text in (long_question, f"{document(10_000)}\n\n{long_question}", "x" * 10_000):
        assert len(focus_query(text, 500)) <= 500
