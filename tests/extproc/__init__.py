"""Tests for the ext_proc processor."""
