"""``sidecar eval``: retrieval quality of every strategy on a labelled dataset.

A dataset (format: ``dataset``) is loaded into a fresh store through the write path's
enrichment (``ingest``), every query is answered by ``MemoryService.search`` — the
request path's retrieval code — for each strategy (``runner``), and the rankings are
scored (``metrics``) and reported (``report``).
"""
