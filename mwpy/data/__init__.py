"""The data plane: files and large values by content hash, served by any process that holds the secret.

:mod:`~mwpy.data.grammar` (the requests as tables, sans-IO),
:mod:`~mwpy.data.link` (the handshake and sealed frames),
:mod:`~mwpy.data.landing` (where an upload may land),
:mod:`~mwpy.data.service` (the component: offered, taken, answered),
:mod:`~mwpy.data.server` (its socket loop), :mod:`~mwpy.data.client`,
:mod:`~mwpy.data.cache` (a slave's copies), :mod:`~mwpy.data.shares`
(shared objects, large arguments and results on the master) and
:mod:`~mwpy.data.plane` (a slave's side of them, handed to the codec per call).
"""
