"""The program an :class:`mwpy.Executor`'s slaves run (by path, as a script).

A user of ``concurrent.futures`` writes no ``@mwpy.master`` and no
``mwpy.run()``, so the slaves cannot run the user's script as the program the
way ``mwpy local`` does. Instead they run this file, which does what
``multiprocessing``'s *spawn* start method does: it loads the user's script
under the name ``__mp_main__`` (so its ``if __name__ == "__main__":`` block
does not run), makes that module ``sys.modules["__main__"]`` too (so functions
the master pickled as ``__main__.f`` are found), and then runs the ordinary
slave role with the ``--mw-*`` options it was given.

Its command line: ``_spawn.py --mw-slave --mw-resource-file F SCRIPT FOLDER
INITIALIZER``, where ``SCRIPT`` is the user's script (``-`` when the master
had none: a REPL or a notebook), ``FOLDER`` the master's working folder and its
``sys.path`` (``os.pathsep`` between them; only the folder for a batch
system's slave), put on ``sys.path`` so that the user's own modules import as
they did on the master, and ``INITIALIZER`` the executor's pickled ``initializer`` and
``initargs`` (``-`` for none), which the slave role runs before it connects.
Preceded by ``--mw-fork-server REPORT_FD COUNT WORK_FOLDER``, it imports the
slave's code once and forks COUNT such slaves (mwpy/slave_start.py).
"""

import gc
import os
import signal
import sys
import threading
import time
import types

#: How often (seconds) a slave looks whether the program that started it is still there.
PARENT_LOOK = 0.5

# Python put this file's folder (the mwpy package itself) first on sys.path: its modules must not
# shadow top-level ones. Its parent makes ``import mwpy`` work even from an uninstalled checkout.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _load_script(path: str) -> None:
    """Run the user's script as module ``__mp_main__``, also known as ``__main__``."""
    from mwpy.names import SLAVE_LOADING_MARK  # noqa: PLC0415 (sys.path is fixed by now)

    module = types.ModuleType("__mp_main__")
    module.__file__ = path
    sys.modules["__mp_main__"] = module
    sys.modules["__main__"] = module
    with open(path, "rb") as source:
        code = compile(source.read(), path, "exec")
    module.__dict__[SLAVE_LOADING_MARK] = True  # mwpy.Executor() refuses to start while this is set
    exec(code, module.__dict__)
    del module.__dict__[SLAVE_LOADING_MARK]


def _end_with_parent(parent: int) -> None:
    """End this slave (or fork server) when the program that started it is gone (``kill -9`` leaves it no time
    to stop its slaves, and a slave in a hung task would not notice its master's hang-up): this process is then
    reparented."""
    while os.getppid() == parent:
        time.sleep(PARENT_LOOK)
    os.kill(os.getpid(), signal.SIGKILL)


def _take_authkey(beside: str | None) -> None:
    """The caller's ``multiprocessing`` authkey, when it left one in the work folder (a local slave whose caller
    imported multiprocessing: mwpy/executor.py), so that its ``Manager()`` proxies accept this slave."""
    from mwpy.names import AUTHKEY_FILE  # noqa: PLC0415 (sys.path is fixed by now)

    if beside is None:
        return
    try:
        with open(os.path.join(os.path.dirname(beside), AUTHKEY_FILE), "rb") as source:
            key = source.read()
    except OSError:  # none left: a batch system's slave, or a caller without multiprocessing
        return
    import multiprocessing.process  # noqa: PLC0415 (only for a caller that uses it)

    multiprocessing.process.current_process().authkey = key


def _serve_forks(arguments: list[str]) -> tuple[int, list[str]]:
    """A fork server (mwpy/slave_start.py's :class:`~mwpy.slave_start.ForkServer`): with the slave's code
    imported, fork COUNT slaves, each in its sandbox; returns in each of them, with the server's pid (its
    parent) and the slave's arguments. The server reports their pids and exits on its pipe and exits when none
    is left, or ends when the process that started it is gone."""
    from mwpy import slave_start  # noqa: PLC0415 (sys.path is fixed by now)

    report, count, folder, *rest = arguments
    reports = int(report)
    if threading.active_count() != 1:  # a fork copies one thread: another's locks would stay held for ever
        raise RuntimeError("the fork server must have one thread when it forks")
    gc.freeze()  # what is imported stays out of the slaves' collections: they neither scan nor copy its pages
    server = os.getpid()
    for number in range(int(count)):
        pid = os.fork()
        if pid == 0:
            os.close(reports)
            slave_start.enter_sandbox(os.path.join(folder, slave_start.job_id(number)))
            sys.argv[1:] = rest  # as a slave started by itself has it (a REPL's slave keeps it)
            return server, rest
        _report(reports, b"%d\n" % pid)
    threading.Thread(target=_end_with_parent, args=(os.getppid(),), name="mwpy-parent", daemon=True).start()
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:  # none left
            raise SystemExit(0) from None
        _report(reports, b"%d %d\n" % (pid, os.waitstatus_to_exitcode(status)))


def _report(reports: int, line: bytes) -> None:
    """Tell the process that started the fork server; gone, the server ends (and so do its slaves)."""
    try:
        os.write(reports, line)
    except BrokenPipeError:
        raise SystemExit(0) from None


def _main() -> int:
    parent = os.getppid()
    # Ctrl-C in the terminal reaches the whole process group: the program that owns the executor decides
    # (its with block stops the executor, which tells its slaves to leave); a slave killed under a task
    # would only count a death against that task and print noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Imports make thousands of objects and no garbage: collecting meanwhile cost a tenth of their time.
    gc.disable()
    # Imported only now: sys.path had to be fixed first (see the top of this file).
    from mwpy.options import parse  # noqa: PLC0415
    from mwpy.program import main  # noqa: PLC0415
    from mwpy.slave_start import FORK_SERVER  # noqa: PLC0415
    from mwpy.wire import codec  # noqa: PLC0415

    arguments = sys.argv[1:]
    if arguments[:1] == [FORK_SERVER]:
        parent, arguments = _serve_forks(arguments[1:])
    gc.enable()
    threading.Thread(target=_end_with_parent, args=(parent,), name="mwpy-parent", daemon=True).start()
    parsed, rest = parse(arguments)
    if len(rest) < 3:
        print("mwpy: _spawn.py needs SCRIPT, FOLDER and INITIALIZER after the --mw-* options", file=sys.stderr)
        return 2
    script, folder, initializing = rest[-3:]
    _take_authkey(parsed.secret_file or parsed.resource_file)
    # The caller's folders (os.pathsep between them), after this one and before the rest, as spawn gives them.
    sys.path[1:1] = [entry for entry in dict.fromkeys(folder.split(os.pathsep)) if entry not in sys.path]
    if script != "-":
        sys.path.insert(1, os.path.dirname(script))
        sys.argv = [script]
        _load_script(script)
    if initializing == "-":
        return main(arguments)
    with open(initializing, "rb") as pickled:  # unpickled once the script is loaded: it may name its functions
        initializer, initargs = codec.decode_initializer(pickled.read())
    return main(arguments, initializer=initializer, initargs=initargs)


if __name__ == "__main__":
    sys.exit(_main())
