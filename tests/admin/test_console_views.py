"""The console's pages as rendered (no server): no markup escaped into text, and the
status filters the console offers are the ones the API and the CLI accept."""

from __future__ import annotations

import re

import pytest

from sidecar.admin.console import views
from sidecar.admin.models import STATUS_FILTERS, ListQuery, parse
from sidecar.admin.service import History
from sidecar.admin_cli import add_commands
from sidecar.memory.records.records import MemoryRecord

DAY_MS = 1_790_000_000_000


def page(record: MemoryRecord) -> str:
    return str(views.memory("alice", History(record, [record], []), {}, [], "form-token"))


@pytest.mark.parametrize(
    ("count", "accessed_at", "said"),
    [(0, 0, "never"), (1, DAY_MS, "once, last "), (3, DAY_MS, "3 times, last ")],
)
def test_the_accessed_row_shows_a_time_not_escaped_markup(
    count: int, accessed_at: int, said: str
) -> None:
    record = MemoryRecord(
        id="m1", user_id="alice", content="User has a dog.", access_count=count,
        accessed_at=accessed_at, created_at=DAY_MS,
    )  # fmt: skip
    html = page(record)
    row = re.search(r"<dt>Accessed</dt><dd>(.*?)</dd>", html)
    assert row is not None, html
    assert row.group(1).startswith(said)
    assert "&lt;" not in row.group(1)
    assert ("<time datetime=" in row.group(1)) == (count > 0)
    assert "1 times" not in html


def test_every_status_the_console_offers_is_accepted_by_the_api_and_the_cli() -> None:
    html = str(views.memories("alice", views.Filters(), {}, None, None))
    select = re.search(r'<select[^>]*name="status".*?</select>', html, re.S)
    assert select is not None
    offered = re.findall(r'<option value="([^"]*)"', select.group(0))
    assert offered == list(STATUS_FILTERS)
    assert "merged" in offered
    for status in offered:
        assert parse(ListQuery, {"status": status}, "query").status == status

    import argparse

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    for status in offered:
        parsed = parser.parse_args(
            ["memories", "list", "--config", "x", "--user", "a", "--status", status]
        )
        assert parsed.status == status


def test_the_memory_page_says_when_and_where_it_was_said_escaped() -> None:
    from sidecar.memory.records.records import Origin

    record = MemoryRecord(
        id="m1", user_id="alice", content="User spent two weeks in Japan.", created_at=DAY_MS,
        excerpt="Back from <b>Japan</b>: two weeks!",
        origins=(Origin("req-7", session="s-3", message=4, refs=("t9",), at=DAY_MS),),
    )  # fmt: skip
    html = page(record)
    said = re.search(r"<dt>Said</dt><dd>(.*?)</dd>", html, re.S)
    assert said is not None
    assert "in session s-3, message 4" in said.group(1)
    assert "<code>req-7</code>" in said.group(1)
    assert "refs t9" in said.group(1)
    assert "<time datetime=" in said.group(1)
    assert "Back from &lt;b&gt;Japan&lt;/b&gt;: two weeks!" in html  # the user's words, escaped
    assert "<b>Japan</b>" not in html
