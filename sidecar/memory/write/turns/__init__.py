"""One turn to stored facts: the durable queue and its journal, extraction, what
counts as the same fact (candidates and the judge), and the writer that runs them."""
