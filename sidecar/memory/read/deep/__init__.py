"""Deep search: an LLM re-rank of a wider pool behind a confidence gate, blended so
the primary order is kept."""
