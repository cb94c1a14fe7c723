"""``--set`` settings of the soak and the end-to-end bench (``e2e/stack.py``)."""

from __future__ import annotations

import pytest

from e2e.stack import merge_settings, parse_settings


def test_dotted_paths_become_nested_overrides() -> None:
    parsed = parse_settings(
        ["llm.transport=httpx", "defaults.retrieval.top_k=7", "defaults.retrieval.hops=0"]
    )
    assert parsed == {
        "llm": {"transport": "httpx"},
        "defaults": {"retrieval": {"top_k": 7, "hops": 0}},
    }


@pytest.mark.parametrize("bad", ["llm", "llm=1", ".transport=x", "llm..x=1"])
def test_a_setting_without_section_and_key_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=r"section\.key=value"):
        parse_settings([bad])


def test_merging_keeps_what_the_override_does_not_name() -> None:
    base = {"server": {"workers": 2}, "embedding": {"lanes": 1, "shared": "auto"}}
    merge_settings(base, {"embedding": {"shared": "off"}, "llm": {"transport": "httpx"}})
    assert base == {
        "server": {"workers": 2},
        "embedding": {"lanes": 1, "shared": "off"},
        "llm": {"transport": "httpx"},
    }
