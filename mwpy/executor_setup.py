"""How an :class:`mwpy.Executor`'s constructor arguments become what runs: the master's ``--mw-*`` options,
the back end's own options, the local slaves' shapes and the program its slaves start.

Apart from mwpy/executor_core.py (the calls) and mwpy/executor_service.py (the engine's thread, the futures)
because it is read once, at construction, and says how an executor is configured, not how it works.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from mwpy import backends
from mwpy.backends.local import LocalBackend
from mwpy.errors import ConfigurationError
from mwpy.executor_early import LOCAL_HOST, SPAWN_PROGRAM, EarlySlaves, main_script, search_path
from mwpy.names import SPAWN_COPY
from mwpy.options import Options, parse
from mwpy.pool.slave_pool import WorkFolder
from mwpy.resources import Resources, own_shape

#: One slave shape as ``slave_resources=`` takes it.
Shape = Resources | Mapping[str, Any] | str
#: Resource-file refresh interval: the overseer learns of new work at most this late (writes are debounced).
UPDATE_INTERVAL = 1.0


def shapes(given: Shape | Sequence[Shape] | None) -> list[Resources]:
    """``slave_resources=`` as a list of shapes: one record or dict, or a list of them."""
    if given is None:
        return []
    many = given if isinstance(given, Sequence) and not isinstance(given, str) else [given]
    return [shape for one in many if (shape := Resources.of(one)) is not None]


def offer(namespace: argparse.Namespace, shapes: list[Resources]) -> list[str]:
    """The local slaves' shapes (``slave_resources=``, else the back end's ``--slave-resources``, else the
    machine's), set for the back end and told to the master as the ``--mw-slave-resources`` on offer."""
    namespace.slave_resources = shapes or namespace.slave_resources
    offered = [own_shape(shape) for shape in namespace.slave_resources] or [own_shape()]
    return [argument for shape in offered for argument in ("--mw-slave-resources", str(shape))]


def backend_options(
    factory: backends.BackendFactory, backend: str, arguments: Sequence[str], work: WorkFolder
) -> argparse.Namespace:
    """The back end's own options (``mwpy overseer``'s), from ``backend_arguments``; the work folder is ours."""
    parser = argparse.ArgumentParser(
        prog=f"mwpy.Executor(backend={backend!r})", add_help=False, conflict_handler="resolve"
    )
    parser.add_argument("--workdir", default=str(work.path))
    factory.add_arguments(parser)
    try:
        namespace = parser.parse_args(list(arguments))
    except SystemExit:
        raise ConfigurationError(f"backend_arguments {list(arguments)!r} are not valid") from None
    namespace.workdir = str(work.path)
    return namespace


def master_options(
    extra: Sequence[str], resource: Path, backend: str, initializer: Path | None, member_id: str
) -> Options:
    """The master's settings: the user's ``--mw-*`` options, then what an executor needs.

    Its slaves' arguments end with what ``mwpy/_spawn.py`` reads: the script,
    the folder and the initializer's file (``-`` for none).
    """
    parsed, rest = parse(["--mw-master", "--mw-resource-file", str(resource), *extra])
    if rest:
        raise ConfigurationError(f"options: not --mw-* options: {rest}")
    script, folder = main_script(), (search_path() if backend == "local" else os.getcwd())
    init = "-" if initializer is None else str(initializer)
    shipped: tuple[str, ...] = ()
    if backend != "local":
        # A batch system's slaves run in a sandbox elsewhere: ship the files, name them as they land there.
        shipped = tuple(path for path in (script, init) if path != "-")
        script, init = (path if path == "-" else os.path.basename(path) for path in (script, init))
        folder = "." if script != "-" else folder
    return attrs.evolve(
        parsed,
        master_host=parsed.master_host or (LOCAL_HOST if backend == "local" else None),
        resource_file=str(resource),
        resource_file_update_interval=UPDATE_INTERVAL,
        member_id=member_id,
        slave_executable=parsed.slave_executable or sys.executable,
        slave_files=(*parsed.slave_files, *shipped),
        slave_arguments=(*frame_limits(parsed), *parsed.slave_arguments, script, folder, init),
    )


def frame_limits(options: Options) -> tuple[str, ...]:
    """The slaves' frame limits matching the master's, when ``options`` changed them: what the master may
    send, a slave must accept (and the other way round)."""
    limits: tuple[str, ...] = ()
    defaults = attrs.fields(Options)
    if options.max_write_buffer_size != defaults.max_write_buffer_size.default:
        limits += ("--mw-max-read-buffer-size", str(options.max_write_buffer_size))
    if options.max_read_buffer_size != defaults.max_read_buffer_size.default:
        limits += ("--mw-max-write-buffer-size", str(options.max_read_buffer_size))
    return limits


def spawn_program(backend: str, workdir: Path) -> str:
    """The program slaves run: ``_spawn.py`` itself locally; for a batch system, a copy in the work folder.

    A batch system ships the program from the submit side, where the resource
    file already is (the work folder must be readable there, and by the job's
    owner); mwpy's installed files need not be (a schedd in a container or a
    chroot, an install in another user's home).
    """
    if backend == "local":
        return SPAWN_PROGRAM
    copy = workdir / SPAWN_COPY
    shutil.copyfile(SPAWN_PROGRAM, copy)
    return str(copy)


def adopt(backend: backends.Backend, early: EarlySlaves, resource_file: Path) -> None:
    """The local back end takes the early slaves as its first jobs, and restarts one that fails as it was started
    (told the master's address and secret on its command line: the master's are the same for its whole run)."""
    assert isinstance(backend, LocalBackend), backend  # early slaves are a plain local executor's
    launch = backends.Launch(early.member_id, str(resource_file), early.command[0], early.command[1:], files=[])
    backend.adopt(launch, early.processes)
