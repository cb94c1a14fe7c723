"""The task tag the sidecar marks its own prompts with (``e2e/mock_protocol.py``):
where in a request it counts, and how it is spelt.
"""

from __future__ import annotations

from typing import Any

from e2e.mock_protocol import format_task_tag, parse_task_tag

# ---------------------------------------------------------------------------
# Task tags
# ---------------------------------------------------------------------------


def test_task_tag_only_counts_at_start_of_first_system_message() -> None:
    tagged = {"messages": [{"role": "system", "content": "[memory-sidecar:extract v2] go"}]}
    tag = parse_task_tag(tagged)
    assert tag is not None
    assert (tag.task, tag.version) == ("extract", 2)
    assert format_task_tag("rewrite", 3) == "[memory-sidecar:rewrite v3]"

    late = {"messages": [{"role": "system", "content": "x [memory-sidecar:extract v1]"}]}
    second = {
        "messages": [
            {"role": "system", "content": "plain"},
            {"role": "system", "content": "[memory-sidecar:extract v1]"},
        ]
    }
    in_user = {"messages": [{"role": "user", "content": "[memory-sidecar:extract v1]"}]}
    empty: dict[str, Any] = {"messages": []}
    for body in (late, second, in_user, empty):
        assert parse_task_tag(body) is None
