"""The slave's parts beside :mod:`mwpy.slave`, which composes them.

``connection`` (the socket to the master: connect, prove membership, read and
write frames), ``running`` (one task run: its arguments, its output, its
timeout), ``lifecycle`` (heartbeats, the soft-kill signal, leaving a lost
master) and ``startup`` (from ``--mw-slave`` to a connected slave: the
resource file, the secret, the initializer, the exit status).
"""
