"""The parts of ``scripts/vendor_protos.py``, which vendors Envoy's ext_proc protos.

The script prints the ``.proto`` import closure of the ext_proc service back from
the descriptors in the ``xds-protos`` package, in a scratch virtualenv of its own
(see the script's docstring for why and how). Its parts, each a concern of its
own: :mod:`.launcher` (the command line; finds or makes that virtualenv and
re-runs there, standard library only), :mod:`.worker` (runs there: loads the
descriptors, renders, writes or checks, compiles and compares), and the printer
it renders with, :mod:`.printer` over :mod:`.symbols` (protoc's name lookup),
:mod:`.options` (option values) and :mod:`.syntax` (the language's constants);
:mod:`.config` holds what is vendored from which release, and where to.
"""
