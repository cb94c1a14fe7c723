"""Query rewriting: an ambiguous follow-up made self-contained, by the LLM or the
heuristic resolver, kept above a confidence and cached."""
