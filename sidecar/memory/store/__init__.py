"""The store: the only code that talks to pymilvus (schema, row conversion, the one
filter builder, migration, tombstones, the milvus-lite read gate)."""
