"""Memory, by role: ``model`` (records), ``store`` (pymilvus), ``embedding``
(backends), ``read`` (the request path) and ``write`` (the write path). Dependencies
run one way: read and write use store, embedding and model; write also keeps the
read side's caches current; neither store nor model imports read or write."""
