"""The master's file service on its own, in its own process, for tests/test_file_service.py.

``python file_service.py FILE [--tls CERT KEY] [--client-timeout S] [--max-connections N]`` publishes FILE,
prints one JSON line ``{"port": ..., "digest": ...}`` and serves until its stdin closes. The secret is
``SECRET`` below and the member id ``MEMBER``: the tests play slaves (and outsiders) against it. Its own
process, so that a test can limit its threads (a pids cgroup) or its descriptors (RLIMIT_NOFILE) as an
attacker would exhaust a master's.
"""

from __future__ import annotations

import argparse
import json
import sys

from mwpy.data.server import FileServer
from mwpy.wire import protocol

SECRET = b"file-service-test-secret-32bytes"
MEMBER = "file-service-test"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--client-timeout", type=float, default=60.0)
    parser.add_argument("--max-connections", type=int, default=4096)
    args = parser.parse_args()
    tls = None if args.tls is None else protocol.tls_server_context(*args.tls)[0]
    server = FileServer(
        SECRET, MEMBER, tls=tls, client_timeout=args.client_timeout, max_connections=args.max_connections
    )
    digest, _ = server.publish(args.file)
    print(json.dumps({"port": server.port, "digest": digest}), flush=True)
    sys.stdin.read()  # until the test closes our stdin
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
