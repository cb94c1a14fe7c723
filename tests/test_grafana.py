"""The example Grafana dashboard (``deploy/grafana/memory-sidecar.json``) is a
dashboard Grafana can lay out, and every query in it reads series the sidecar
exports, by labels those series have: a renamed metric or label cannot leave an
empty panel behind."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest

from tests.support.series import TARGET_LABELS, Read, exported, reads

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "memory-sidecar.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: Grafana's variables in a range (``[$__rate_interval]``) are not PromQL: Grafana
#: puts a duration there before Prometheus sees the query.
RANGE_VARIABLE = re.compile(r"\[\$(?:\{\w+\}|\w+)\]")
LABEL_VALUES = re.compile(r"label_values\((?P<selector>.+),\s*(?P<label>\w+)\)")
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def load() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows and the panels of collapsed rows included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def promql(expr: str) -> str:
    """``expr`` as Prometheus receives it (one duration for any range variable)."""
    return RANGE_VARIABLE.sub("[5m]", expr)


def overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def layout_problems(dashboard: dict[str, Any]) -> list[str]:
    found: list[str] = []
    ids = [panel["id"] for panel in panels(dashboard)]
    if len(ids) != len(set(ids)) or not all(isinstance(i, int) for i in ids):
        found.append(f"panel ids not unique integers: {ids}")
    placed: list[tuple[str, dict[str, int]]] = []
    for panel in panels(dashboard):
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in "hwxy"):
            found.append(f"{panel['title']}: gridPos {grid}")
            continue
        if grid["x"] < 0 or grid["y"] < 0 or grid["w"] < 1 or grid["h"] < 1:
            found.append(f"{panel['title']}: gridPos {grid}")
        if grid["x"] + grid["w"] > 24:
            found.append(f"{panel['title']}: wider than the grid's 24 columns")
        found += [f"{panel['title']} overlaps {title}" for title, g in placed if overlap(grid, g)]
        placed.append((panel["title"], grid))
    return found


def query_problems(dashboard: dict[str, Any]) -> list[str]:
    """Why a query of ``dashboard`` would show nothing: a series the sidecar does not
    export, a label it lacks, a selector the job and instance variables do not
    filter, a legend naming a label the result does not keep, another data source."""
    known = exported()
    found: list[str] = []
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        title = panel["title"]
        if panel.get("datasource") != DATASOURCE:
            found.append(f"{title}: panel data source {panel.get('datasource')}")
        if not panel.get("targets"):
            found.append(f"{title}: no queries")
        for target in panel.get("targets", []):
            if target.get("datasource") != DATASOURCE:
                found.append(f"{title}: query data source {target.get('datasource')}")
            expr = target.get("expr", "")
            try:
                tree = promql_parser.parse(promql(expr))
            except ValueError as exc:
                found.append(f"{title}: {expr!r} does not parse: {exc}")
                continue
            read = reads(promql(expr))
            if not read:
                found.append(f"{title}: {expr!r} reads no series")
            for series in read:
                if series.metric not in known:
                    found.append(f"{title}: {series.metric} is not exported")
                    continue
                missing = series.labels - known[series.metric] - TARGET_LABELS
                if missing:
                    found.append(f"{title}: {series.metric} has no label {sorted(missing)}")
            kept = set().union(*(series.labels for series in read))
            for label in LEGEND_LABEL.findall(target.get("legendFormat", "")):
                if label not in kept:
                    found.append(f"{title}: legend names {label}, which the query drops")
            found += [f"{title}: {s}" for s in unfiltered(tree)]
    return found


def unfiltered(tree: promql_parser.Expr) -> list[str]:
    """Selectors of ``tree`` that the ``job`` and ``instance`` variables do not filter."""
    wanted = {("job", "$job"), ("instance", "$instance")}
    found: list[str] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            have = {(m.name, m.value) for m in node.matchers.matchers}
            if not wanted <= have:
                found.append(f"{node.name} not filtered by $job and $instance")

    promql_parser.walk(tree, visit)
    return found


def variable_problems(dashboard: dict[str, Any]) -> list[str]:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    found: list[str] = []
    if variables.get("datasource", {}).get("type") != "datasource":
        found.append("no datasource variable")
    elif variables["datasource"]["query"] != "prometheus":
        found.append("the datasource variable does not list Prometheus data sources")
    known = exported()
    for name in ("job", "instance"):
        variable = variables.get(name, {})
        query = variable.get("query", {})
        text = query.get("query", "") if isinstance(query, dict) else query
        matched = LABEL_VALUES.fullmatch(text)
        if variable.get("datasource") != DATASOURCE or not matched:
            found.append(f"${name}: not label_values over the Prometheus data source")
            continue
        if matched["label"] != name:
            found.append(f"${name} lists the values of {matched['label']}")
        for series in reads(matched["selector"]):
            if series.metric not in known:
                found.append(f"${name}: {series.metric} is not exported")
            elif not series.labels <= known[series.metric] | TARGET_LABELS:
                found.append(f"${name}: {series.metric} lacks {series.labels}")
    return found


def test_the_dashboard_is_laid_out() -> None:
    dashboard = load()
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"]
    assert dashboard["title"]
    assert dashboard["id"] is None  # Grafana gives one on import
    assert layout_problems(dashboard) == []
    kinds = {panel["type"] for panel in panels(dashboard)}
    assert kinds <= {"row", "timeseries"}, kinds
    for panel in panels(dashboard):
        if panel["type"] == "timeseries":
            assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
            assert panel["options"]["legend"]["showLegend"], panel["title"]
            refs = [target["refId"] for target in panel["targets"]]
            assert len(refs) == len(set(refs)), panel["title"]


def test_every_query_reads_exported_series_by_their_labels() -> None:
    dashboard = load()
    assert variable_problems(dashboard) == []
    assert query_problems(dashboard) == []
    read = {
        series.metric
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
        for series in reads(promql(target["expr"]))
    }
    # What the dashboard is for: one series of each.
    for metric in (
        "phase_seconds_bucket",
        "injected_memories_bucket",
        "instructions_blocked_total",
        "write_queue_depth",
        "turns_total",
        "facts_total",
        "fail_open_total",
        "store_errors_total",
        "llm_calls_total",
        "embed_seconds_bucket",
        "admin_requests_total",
    ):
        assert "memory_sidecar_" + metric in read, metric


def test_function_names_and_grouping_labels_are_not_taken_for_metrics() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, phase) (rate("
        'memory_sidecar_phase_seconds_bucket{job=~"$job", instance=~"$instance"}'
        "[$__rate_interval]))) / on (phase) group_left sum without (le) (rate"
        '(memory_sidecar_phase_seconds_count{job=~"$job"}[$__rate_interval]))'
    )
    assert reads(promql(expr)) == [
        Read("memory_sidecar_phase_seconds_bucket", frozenset({"le", "phase", "job", "instance"})),
        Read("memory_sidecar_phase_seconds_count", frozenset({"le", "phase", "job"})),
    ]


@pytest.mark.parametrize(
    ("field", "right", "wrong", "caught"),
    [
        # a counter is exported as _total
        ("expr", "fail_open_total", "fail_open", "memory_sidecar_fail_open is not exported"),
        ("expr", "phase_seconds_bucket", "phase_second_bucket", "phase_second_bucket is not"),
        ("expr", "by (reason)", "by (tenant)", "has no label ['tenant']"),
        ("expr", 'job=~"$job", ', "", "not filtered by $job and $instance"),
        ("expr", "[$__rate_interval]))", "[$__rate_interval])", "does not parse"),
        ("legendFormat", "{{reason}}", "{{user}}", "legend names user"),
    ],
)
def test_a_wrong_query_would_be_caught(field: str, right: str, wrong: str, caught: str) -> None:
    dashboard = load()
    assert query_problems(dashboard) == []
    target = next(
        target
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
        if right in target[field]
    )
    target[field] = target[field].replace(right, wrong, 1)
    problems = query_problems(dashboard)
    assert any(caught in problem for problem in problems), problems


def test_overlapping_panels_and_a_bad_variable_would_be_caught() -> None:
    dashboard = copy.deepcopy(load())
    timeseries = [panel for panel in panels(dashboard) if panel["type"] == "timeseries"]
    timeseries[1]["gridPos"] = dict(timeseries[0]["gridPos"])
    timeseries[2]["id"] = timeseries[3]["id"]
    problems = layout_problems(dashboard)
    assert any("not unique" in problem for problem in problems), problems
    assert any("overlaps" in problem for problem in problems), problems
    job = next(v for v in dashboard["templating"]["list"] if v["name"] == "job")
    job["query"]["query"] = "label_values(memory_sidecar_streams, job)"
    assert variable_problems(dashboard) == ["$job: memory_sidecar_streams is not exported"]
