"""The series the sidecar exports, and the series and labels a PromQL expression reads:
what the example alerts and the Grafana dashboard under ``deploy/`` are checked
against, so a renamed metric or label cannot leave a query that reads nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import promql_parser
from prometheus_client.metrics import MetricWrapperBase

from sidecar.metrics import Metrics

#: The series a metric family of each type is exported as (``_created`` left out:
#: nothing should query it).
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
#: Labels Prometheus adds to every series it scrapes (the target's).
TARGET_LABELS = frozenset({"job", "instance"})


def exported() -> dict[str, set[str]]:
    """Every series name the sidecar exports, with the label names it carries.

    Names and types come from a fresh :class:`Metrics`' registry (what ``/metrics``
    renders); label names from its collectors, since a labelled metric has no
    samples, hence no labels in the registry, before it is first used."""
    metrics = Metrics()
    labels = {
        collector._name: tuple(collector._labelnames)
        for collector in vars(metrics).values()
        if isinstance(collector, MetricWrapperBase)
    }
    series: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        for suffix in SUFFIXES[family.type]:
            names = set(labels[family.name]) | ({"le"} if suffix == "_bucket" else set())
            series[family.name + suffix] = names
    return series


@dataclass(frozen=True)
class Read:
    """One series selector of an expression: the metric it names (None for a bare
    ``{...}``) and every label the expression needs that series to carry (its
    matchers', and those of the ``by``/``without``/``on``/``ignoring``/``group_*``
    clauses around it: strict, as nothing here makes labels with ``label_replace``)."""

    metric: str | None
    labels: frozenset[str]


def reads(promql: str) -> list[Read]:
    """The series ``promql`` reads, in order; raises ValueError when it does not
    parse. Function names, keywords and grouping labels are never taken for metrics:
    they are read from the parsed expression, not its text."""
    found: list[Read] = []
    _visit(promql_parser.parse(promql), frozenset(), found)
    return found


def _visit(node: Any, grouping: frozenset[str], found: list[Read]) -> None:
    if isinstance(node, promql_parser.MatrixSelector):
        node = node.vector_selector
    if isinstance(node, promql_parser.VectorSelector):
        matched = {m.name for m in node.matchers.matchers}
        for alternative in node.matchers.or_matchers:
            matched |= {m.name for m in alternative}
        found.append(Read(node.name, grouping | (matched - {"__name__"})))
    elif isinstance(node, promql_parser.AggregateExpr):
        labels = set(node.modifier.labels) if node.modifier else set()
        if isinstance(node.param, promql_parser.Expr):
            _visit(node.param, grouping, found)
        _visit(node.expr, grouping | labels, found)
    elif isinstance(node, promql_parser.BinaryExpr):
        labels = set()
        if node.modifier is not None:
            if node.modifier.matching is not None:
                labels |= set(node.modifier.matching.labels)
            labels |= set(node.modifier.group_labels or ())
        _visit(node.lhs, grouping | labels, found)
        _visit(node.rhs, grouping | labels, found)
    elif isinstance(node, promql_parser.Call):
        for arg in node.args:
            _visit(arg, grouping, found)
    elif isinstance(
        node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr
    ):
        _visit(node.expr, grouping, found)
    else:
        assert isinstance(node, promql_parser.NumberLiteral | promql_parser.StringLiteral), node
