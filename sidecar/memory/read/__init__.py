"""The read side: the request-path pipeline (rewrite -> embed -> search -> deep search
-> assemble), the retrieval strategies, and the corpus and query caches they score."""
