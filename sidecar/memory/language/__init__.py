"""The rules about words, read from text alone: what a fact says (facts, slots and the
attributes declared once, entities, dates and "when"), what is an instruction rather
than a fact (directives), how a turn becomes facts without an LLM (heuristics), text
hygiene, ambiguous questions and their resolver, the question of a long message. Shared
word lists live once in :mod:`.lexicon`. Imports nothing of the memory layer but
records."""
