"""A scope's memories in process: the corpus snapshot (records, vectors, BM25 and
n-gram indexes), extended in place on appends, and the cache that loads, refreshes and
writes through it. Read by the request path, kept current by the write path."""
