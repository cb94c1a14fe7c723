"""The process: the composition root (:class:`Components`), the gRPC server, the
supervisor and its workers, a writer process of its own, the cache relay, GC control."""
