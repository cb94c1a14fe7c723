"""Keeping stored memories in shape: retention (the per-user cap), consolidation (one
fact, one memory) and retrieval access counts."""
