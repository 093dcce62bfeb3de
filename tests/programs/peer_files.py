"""Two slave-side processes and the data plane between them, for tests/test_file_service.py.

``python peer_files.py serve FILE`` holds FILE (as a slave holds what it fetched or made), serves it by
its SHA-256 on a file service of its own, prints one JSON line ``{"port": ..., "digest": ...}`` and
serves until its stdin closes. ``python peer_files.py fetch PORT DIGEST`` fetches that hash from the
service on PORT into a slave's cache (:class:`~mwpy.data.cache.SlaveCache`, as a slave fetches from its
master) and prints ``{"sha256": ..., "size": ...}`` of what it holds then; a refusal is one line on stderr
and status 1. Both prove membership with the secret in ``MWPY_TEST_PEER_SECRET`` (hex) and member id
``MEMBER``, as a slave and its master's file service do.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

from mwpy.data.cache import SlaveCache
from mwpy.data.server import FileServer
from mwpy.data.service import FileServiceError

MEMBER = "peer-files-test"


def main(argv: list[str]) -> int:
    secret = bytes.fromhex(os.environ["MWPY_TEST_PEER_SECRET"])
    if argv[0] == "serve":
        server = FileServer(secret, MEMBER)
        digest, _ = server.publish(argv[1])
        print(json.dumps({"port": server.port, "digest": digest}), flush=True)
        sys.stdin.read()
        server.close()
        return 0
    cache = SlaveCache(secret, MEMBER, None, 1 << 30)
    try:
        path = cache.get(argv[2], ("127.0.0.1", int(argv[1])))
        content = path.read_bytes()
    except FileServiceError as exc:
        print(f"peer_files: {exc}", file=sys.stderr)
        return 1
    finally:
        cache.remove()
    print(json.dumps({"sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
