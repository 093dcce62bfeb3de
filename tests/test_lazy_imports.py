"""``import mwpy`` loads next to nothing; a slave loads the slave's parts; optional parts load with their option.

Each check runs in a fresh interpreter (a test process has imported
everything already), as a user's program, a slave start or ``mwpy status``
would. design.md states the import times these buy.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from tests.support import PYTHON, ROOT, write_resource_file

#: A program's declarations, as a user writes them.
DECLARATIONS = """
@mwpy.task
def double(x: int) -> int:
    return 2 * x

@mwpy.master
def main(mw, argv):
    return 0
"""
#: What a master's optional options bring, and the slave never needs.
MASTER_ONLY = {"mwpy.master", "mwpy.net.engine", "mwpy.core.scheduler", "mwpy.core.outcomes", "mwpy.executor"}
OPTIONAL = {"mwpy.core.journal", "sqlite3", "mwpy.observe.events", "mwpy.observe.goodput", "mwpy.pool.bundle"}


def loaded_after(code: str, cwd: Path = ROOT) -> set[str]:
    """The modules a fresh interpreter holds after running ``code`` (which may print nothing else)."""
    probe = textwrap.dedent(code) + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def run(code: str) -> str:
    done = subprocess.run(
        [PYTHON, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_decorators_work_whatever_submodule_was_imported_first() -> None:
    """Importing mwpy.master (or .task, .slave) would make Python bind the submodule where the decorator is."""
    first = "import mwpy.master\nimport mwpy.slave\nfrom mwpy.task import registry\nimport mwpy\n"
    then = textwrap.dedent("""
        @mwpy.slave
        def work(slave, argv):
            return 0

        from mwpy.master import Master
        print(double(4), "double" in registry, callable(mwpy.master), Master.__name__, mwpy.Master is Master)
    """)
    out = run(first + DECLARATIONS + then)
    assert out.split() == ["8", "True", "True", "Master", "True"]


def test_import_mwpy_loads_only_the_exceptions() -> None:
    mwpy_modules = {name for name in loaded_after("import mwpy") if name.startswith("mwpy")}
    assert mwpy_modules == {"mwpy", "mwpy._version", "mwpy.errors"}


def test_reading_a_resource_file_loads_no_role() -> None:
    """``mwpy status``, the overseer and a slave read the resource file first: that must not load the rest."""
    loaded = loaded_after("import mwpy.resource_file")
    assert {"mwpy.task", "mwpy.program", "mwpy.slave", "mwpy.wire.protocol"}.isdisjoint(loaded)
    assert MASTER_ONLY.isdisjoint(loaded)


def test_a_slave_loads_no_part_of_the_master(tmp_path: Path) -> None:
    resource = tmp_path / "resource.json"
    write_resource_file(resource, computation_status="finished")  # the slave reads it and leaves at once
    program = tmp_path / "program.py"
    program.write_text(
        "import json, sys\nimport mwpy\n"
        + DECLARATIONS
        + f"status = mwpy.main(['--mw-slave', '--mw-resource-file', {str(resource)!r}])\n"
        + "print(json.dumps([status, sorted(sys.modules)]))\n"
    )
    done = subprocess.run([PYTHON, str(program)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    status, modules = json.loads(done.stdout.splitlines()[-1])
    assert status == 0
    assert "mwpy.slave" in modules
    assert "mwpy.calls" in modules  # the built-in task algorithms are there for an Executor's tasks
    assert (MASTER_ONLY | OPTIONAL).isdisjoint(modules)


def test_a_master_loads_its_optional_parts_only_with_their_options(tmp_path: Path) -> None:
    def master_with(*options: str) -> set[str]:
        return loaded_after(f"""
            import contextlib
            from mwpy import options
            from mwpy.master import Master
            from mwpy.observe.audit import Audit
            parsed, _ = options.parse(["--mw-master", "--mw-master-host", "127.0.0.1", "--mw-resource-file",
                                       {str(tmp_path / "rf.json")!r}, *{list(options)!r}])
            with contextlib.closing(Audit({str(tmp_path / "audit")!r})) as audit:
                with Master(parsed, audit=audit, secret=bytes(32), program={str(tmp_path / "p.py")!r}):
                    pass
        """)

    (tmp_path / "p.py").write_text("")
    plain = master_with()
    assert OPTIONAL.isdisjoint(plain)
    assert "ssl" not in plain  # loaded with --mw-tls-cert only (test_a_run_without_tls_never_imports_ssl)
    everything = master_with("--mw-journal", str(tmp_path / "j.db"), "--mw-events", str(tmp_path / "e.jsonl"))
    assert {"mwpy.core.journal", "sqlite3", "mwpy.observe.events", "mwpy.observe.goodput"} <= everything


def test_an_executor_master_imports_neither_the_file_watcher_nor_cattrs() -> None:
    """A short script waits for ``import mwpy`` and the Executor's constructor before its first slave starts
    (issue 21 item 4): the overseer's thread imports watchdog after it started the slaves, and cattrs with
    the first read of the resource file; the master only writes the file."""
    loaded = loaded_after("import mwpy.executor")
    assert not {name for name in loaded if name.split(".")[0] in ("watchdog", "cattrs")}


def test_importing_the_executor_loads_no_engine_so_its_slaves_start_first() -> None:
    """A plain local executor starts its slaves before it loads mwpy's engine (issue 21 item 4: their start
    overlaps that import): ``import mwpy.executor`` brings neither the master's modules nor attrs."""
    loaded = loaded_after("import mwpy.executor")
    assert loaded.isdisjoint(MASTER_ONLY - {"mwpy.executor"} | {"mwpy.executor_core", "mwpy.task", "attrs", "attr"})


def test_a_slave_imports_no_file_helpers_before_it_connects() -> None:
    """An Executor's slaves start on its first result's path (issue 37 item 1): what ``mwpy/_spawn.py`` imports
    before the handshake brings neither ``tempfile`` and ``shutil`` (with bz2, lzma and zlib: a master's run
    folders need them) nor ``html`` (the HTML views)."""
    loaded = loaded_after("from mwpy.options import parse\nfrom mwpy.program import main\nfrom mwpy.wire import codec")
    assert loaded.isdisjoint({"tempfile", "shutil", "bz2", "lzma", "html"})


def test_a_fork_server_imports_only_what_its_slaves_use() -> None:
    """An Executor's fork server imports the slave's code before it forks the first slaves (issue 37 item 1):
    not ``subprocess`` (it forks), ``pathlib``, ``argparse`` (the overseer's options) or ``random`` (a slave's
    lifetime), which a slave's start does not use."""
    loaded = loaded_after(
        "from mwpy.options import parse\nfrom mwpy.program import main\nfrom mwpy.slave_start import FORK_SERVER\n"
        "from mwpy.wire import codec"
    )
    assert loaded.isdisjoint({"subprocess", "pathlib", "argparse", "random"})


def test_an_executor_engine_loads_nothing_its_first_result_does_not_use() -> None:
    """The caller's import of the engine is on an Executor's first result's path (issue 37 item 1): the
    overseer (made by the pool's thread at its first look), the file service and the client that fetches held
    values (each with its first use) are not part of it."""
    loaded = loaded_after("import mwpy.executor_core")
    assert loaded.isdisjoint({"mwpy.overseer", "mwpy.data.server", "mwpy.data.client", "mwpy.data.cache", "secrets"})


def test_a_run_without_tls_never_imports_ssl() -> None:
    """``ssl`` costs 5 to 12 ms of each process's start-up (issue 37 item 1): an Executor's caller and its
    slaves, which use no TLS, do not import it; the first TLS context does."""
    loaded = loaded_after(
        "from mwpy.options import parse\nfrom mwpy.program import main\nfrom mwpy.wire import codec\n"
        "import mwpy.executor_core\nimport mwpy.data.client, mwpy.data.server, mwpy.slaveside.connection"
    )
    assert "ssl" not in loaded
    assert "ssl" in loaded_after("from mwpy.wire import protocol\nprotocol.tls_client_context()")


def test_a_slave_reaches_its_master_by_name_or_address_without_the_idna_codec() -> None:
    """Python encodes a ``str`` host with the idna codec before it resolves it (``stringprep`` and
    ``unicodedata`` to import: some 7 ms before a slave's first task): mwpy's connections give an ASCII
    host to the resolver as bytes, by address or by name alike."""
    out = run("""
        import socket, sys
        from mwpy.net import ports
        with socket.create_server(("127.0.0.1", 0)) as listener:
            port = listener.getsockname()[1]
            for host in ("127.0.0.1", "localhost"):
                with ports.connect(host, port, 5.0) as sock:
                    print(sock.getpeername()[1] == port, end=" ")
        print("encodings.idna" in sys.modules)
    """)
    assert out.split() == ["True", "True", "False"]
