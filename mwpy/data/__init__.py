"""The data plane: files and large values by content hash, served by any process that holds the secret.

:mod:`~mwpy.data.grammar` (the requests as tables, sans-IO),
:mod:`~mwpy.data.link` (the handshake and sealed frames),
:mod:`~mwpy.data.landing` (where an upload may land),
:mod:`~mwpy.data.service` (the component: offered, taken, answered),
:mod:`~mwpy.data.server` (its socket loop), :mod:`~mwpy.data.client`,
:mod:`~mwpy.data.cache` (a slave's copies) and :mod:`~mwpy.data.shares`
(shared objects, large arguments and results as explicit steps).
"""
