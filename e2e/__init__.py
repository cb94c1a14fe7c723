"""End-to-end support code: the deterministic mock LLM server and helpers."""
