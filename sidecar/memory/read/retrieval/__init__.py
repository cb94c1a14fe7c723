"""Retrieval strategies: one protocol, one strategy per module, composed by name."""
