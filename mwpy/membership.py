"""This process in its computation: the secret and member id it proves membership with, its resource file.

Set once by the side that runs (the master at start, a slave once it has read
its endpoint) and read by a program's own authenticated service beside the
master (``mwpy jobs``' file service), so that it proves membership exactly as
the master and its slaves do, with no second reading of the options.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from mwpy import safe_files
from mwpy.errors import ConfigurationError, UnsafeFileError

#: A secret file is a few dozen bytes; anything past this is not one.
SECRET_MAX_SIZE = 4096


class Membership(NamedTuple):
    """This process in its computation: the secret and member id it proves membership with, its resource file.

    And what a service beside the master (``mwpy jobs``' file service) needs to be as safe as the master's
    own port: its TLS settings, its client timeout, the run's own files no peer may replace.
    """

    secret: bytes
    member_id: str
    resource_file: str | None
    #: Master with ``--mw-tls-cert``: the certificate and key it speaks TLS with.
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Slave of a TLS master: the fingerprint it pinned for the master's certificate.
    tls_fingerprint: str | None = None
    #: ``--mw-client-timeout``.
    client_timeout: float = 60.0
    #: Master: the files of the run (resource file, journal, event log, audit, secret...), which no peer may replace.
    own_files: tuple[str, ...] = ()


_current: Membership | None = None


def current() -> Membership | None:
    """The running master's or slave's membership, or None outside one (before ``mwpy.run()`` got that far)."""
    return _current


def join(membership: Membership) -> None:
    """This process's membership, once its side knows it."""
    global _current  # this process's: one computation per process
    _current = membership


def read_secret(path: str | os.PathLike[str]) -> bytes:
    """The secret in ``path``: a regular file of this user's that nobody else can write or read.

    Whoever can write the secret file controls every slave, and whoever can read it is inside
    the computation and can run code in the master (docs/security.md): a file others could have
    changed or read is refused, as ssh refuses such a private key, rather than trusted.
    """
    try:
        secret = safe_files.read_bytes(path, max_size=SECRET_MAX_SIZE, secret=True).strip()
    except UnsafeFileError as exc:
        raise ConfigurationError(f"--mw-secret-file: cannot use {exc}") from None
    if not secret:
        raise ConfigurationError(f"--mw-secret-file: {path} is empty")
    return secret
