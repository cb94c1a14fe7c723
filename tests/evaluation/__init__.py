"""Tests for ``sidecar eval`` (sidecar.evaluation)."""
