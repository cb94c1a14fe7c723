"""Writing rows: the gateway every writer stores through (hygiene, the owner's lock,
enrichment, upsert, write-through), owner locks, bulk loads and the enricher."""
