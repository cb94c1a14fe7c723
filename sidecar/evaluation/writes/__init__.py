"""``sidecar eval-writes``: the write path measured on a dataset of turns (format:
``dataset``): the turns go through the production write path (``runner``), the
store and the injected memories are scored (``measure``, ``scoring``) and reported
(``report``)."""
