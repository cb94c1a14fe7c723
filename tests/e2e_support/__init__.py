"""Tests for the end-to-end support code under ``e2e/``."""
