"""The test suite (mirrors the sidecar package)."""
