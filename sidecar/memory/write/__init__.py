"""The write side, by job: ``turns`` (queue, journal, extraction, same-fact judgement,
the writer), ``rows`` (the gateway every writer stores through), ``upkeep``
(retention, consolidation, access counts) and ``tree`` (the category tree)."""
