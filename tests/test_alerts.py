"""The example alerting rules (``deploy/prometheus/alerts.yaml``) name only series
the sidecar exports, with labels those series have: a renamed metric cannot leave
an alert that never fires."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from tests.support.series import exported

RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "alerts.yaml"
SERIES = re.compile(r"\b(memory_sidecar_\w+|envoy_http_ext_proc_\w+)(?:\{([^}]*)\})?")
#: Envoy's own ext_proc counters the rules may name (Envoy 1.40's /stats/prometheus,
#: checked by tests/e2e/test_faults.py), with the label Envoy gives them.
ENVOY_SERIES = {
    name: {"envoy_http_conn_manager_prefix"}
    for name in ("envoy_http_ext_proc_failure_mode_allowed", "envoy_http_ext_proc_message_timeouts")
}


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_alert_names_exported_series_and_their_labels() -> None:
    known = exported() | ENVOY_SERIES
    names = [rule["alert"] for rule in rules()]
    assert len(names) == len(set(names)) >= 10
    for rule in rules():
        promql_parser.parse(rule["expr"])  # PromQL that Prometheus would load
        found = SERIES.findall(rule["expr"])
        assert found, rule["alert"]
        for name, selector in found:
            assert name in known, (rule["alert"], name)
            used = set(re.findall(r"(\w+)\s*!?[=~]", selector))
            assert used <= known[name], (rule["alert"], name, used - known[name])
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"]


def test_a_misspelt_series_would_be_caught() -> None:
    assert "memory_sidecar_fail_open_total" in exported()
    assert "memory_sidecar_fail_open" not in exported()  # a counter is read as _total
    assert exported()["memory_sidecar_phase_seconds_bucket"] == {"phase", "le"}
    with pytest.raises(ValueError, match="parenthesis"):
        promql_parser.parse("rate(memory_sidecar_streams_total[5m]")
