"""The read side: the request-path pipeline (rewrite -> embed -> search -> deep search
-> assemble the block), the retrieval strategies and the query caches."""
