"""Memory: records, the store adapter, embeddings, retrieval and the write pipeline."""
