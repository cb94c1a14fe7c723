"""Memory, by role: ``records`` (what a memory is), ``language`` (rules about words),
``store`` (pymilvus), ``embedding`` (backends), ``corpus`` (a scope's memories in
process and their cache), ``read`` (the request path) and ``write`` (the write path).
Dependencies run one way: records <- language <- store <- corpus <- read, write (and
embedding beside them); read and write never import each other."""
