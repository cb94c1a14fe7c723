"""The write side: the durable turn queue and its journal, the writer (extraction,
dedup, enrichment, storing), categories, retention and access counts."""
