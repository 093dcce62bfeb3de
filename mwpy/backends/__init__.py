"""Batch-system back ends: how the overseer starts, lists and removes slave jobs.

A back end knows nothing of mwpy's protocol: it runs the command the resource
file describes, ships the files it names, and keeps a failed slave queued
(Condor's ``on_exit_remove = (ExitBySignal == False) && (ExitCode == 0)``);
it names a slave's exit status as the slave's stderr line does (:func:`exited`).
The overseer decides how many; the back end only does as it is told.

Back ends plug in: :func:`register` names a factory (built-ins: ``local`` and
``condor``), installed distributions offer theirs through the
``mwpy.backends`` entry-point group, and ``mwpy overseer --backend
package.module:attr`` imports one by path. A factory adds its own options to
``mwpy overseer`` (:class:`BackendFactory`), so a new back end is one module
and one registration, with no edit to the command line or the overseer.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, Protocol, cast, runtime_checkable

import attrs

from mwpy.errors import BackendError, ConfigurationError
from mwpy.resource_file import ResourceFile
from mwpy.resources import Resources
from mwpy.wire.protocol import ExitCode


def exited(status: int) -> str:
    """``exited with status 4 MASTER_LOST``: a slave job's exit status with the name its stderr line gives it
    (docs/exit-codes.md); a status mwpy does not choose has no name."""
    try:
        return f"exited with status {status} {ExitCode(status).name}"
    except ValueError:
        return f"exited with status {status}"


class JobState(enum.Enum):
    """Where a slave job stands in its batch system."""

    IDLE = "idle"  # queued, waiting to (re)start
    RUNNING = "running"
    HELD = "held"  # stopped by the batch system or an administrator


@attrs.frozen
class Job:
    """One slave job of the computation, as its batch system reports it."""

    job_id: str
    state: JobState
    #: The exit status of the job's last run, or None when it has not exited yet (or was killed by a signal).
    exit_code: int | None = None
    #: Why the job does not run as it should: the batch system's hold reason, or how its last run failed.
    reason: str | None = None
    #: When (Unix time) the job entered its current state, or None when the batch system does not say:
    #: "idle for 12 min" tells a job no slot matches from one that was queued a moment ago.
    since: float | None = None
    #: MB of memory the job asked for (its ``request_memory``), when the batch system says.
    memory: int | None = None
    #: Held because it used more memory than it asked for (the overseer replaces it asking for more).
    memory_hold: bool = False
    #: How many of the job's runs have failed, when the batch system counts them; a watcher that looks
    #: now and then cannot otherwise tell one failure from several between two looks.
    failed_runs: int | None = None
    #: The need the job was submitted for (``str(Resources)``, its ``MwpyShape``), None for a plain slave job.
    shape: str | None = None

    def in_state_for(self, now: float | None = None) -> float | None:
        """Seconds the job has been in its current state (None when unknown)."""
        if self.since is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.since)


@attrs.frozen
class Launch:
    """What one slave job runs, read from the resource file."""

    member_id: str
    resource_file: str
    executable: str
    arguments: list[str]
    files: list[str]
    #: MB of memory a job should ask for at least (None: the back end's default or the user's submit file).
    memory: int | None = None
    #: The need these slave jobs serve (their requests and requirements), None for plain slave jobs.
    shape: Resources | None = None

    @classmethod
    def of(
        cls, record: ResourceFile, resource_file: str, memory: int | None = None, shape: Resources | None = None
    ) -> Launch:
        return cls(
            member_id=record.member_id,
            resource_file=resource_file,
            executable=record.slave_executable,
            arguments=list(record.slave_arguments),
            files=list(record.slave_files),
            memory=memory,
            shape=shape,
        )


class Backend(Protocol):
    """The small interface every batch system implements for the overseer.

    A batch system that refuses a request or cannot be reached raises
    :class:`~mwpy.errors.BackendError` (one line, for users); the overseer
    logs it and tries again later.
    """

    #: Shown in logs and ``mwpy status``.
    name: str

    def jobs(self) -> list[Job]:
        """The slave jobs of this computation that are still in the queue."""
        ...

    def submit(self, launch: Launch, count: int) -> None:
        """Queue ``count`` more slave jobs, in one batch."""
        ...

    def remove(self, job_ids: Sequence[str]) -> None:
        """Take these jobs out of the queue (running ones are stopped)."""
        ...

    def poll(self) -> None:
        """Let the back end do its own periodic work (restart exited slaves, ...)."""
        ...

    def close(self) -> None:
        """Release resources; jobs are left as they are."""
        ...


@runtime_checkable
class MasterWatch(Protocol):
    """A back end that can see the master's own job (Condor: ``submit/master.sub``'s job).

    Optional: the overseer asks only a back end that has it, and only when the
    resource file names the master's job (``master_condor_job``). Pilots must
    not outlive their master: once its job has left the queue, the overseer
    removes every slave job of the computation (docs/condor.md).
    """

    def master_departure(self, job_id: str) -> str | None:
        """How the master's job left the queue, one line; None while it is queued or this system does not know it."""
        ...

    def master_known(self, job_id: str) -> bool:
        """Whether this system knows ``job_id`` as a master's job, queued or gone (a mistyped id: neither)."""
        ...


@runtime_checkable
class ShapedJobs(Protocol):
    """A back end whose slave jobs can be made for one need (Condor: ``request_*``, ``requirements``).

    Optional: only for such a back end does the overseer keep slave jobs per
    need of the tasks (:attr:`Launch.shape` in, :attr:`Job.shape` out); any
    other back end gets plain slave jobs, as before shapes existed (the local
    back end gives its slaves the shapes of its own options).
    """

    def submit_shaped(self, launch: Launch, count: int) -> None:
        """Queue ``count`` slave jobs for ``launch.shape``, each saying so in the listing (:attr:`Job.shape`)."""
        ...


# ---------------------------------------------------------------------- the registry


class BackendFactory(Protocol):
    """What ``mwpy overseer --backend NAME`` needs of a back end: its options, then an instance.

    A back-end class satisfies it with two classmethods, so one module and one
    registration add a back end: ``mwpy/cli.py`` asks the chosen factory for
    its command-line options instead of knowing every back end's options.
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this back end's own options to the ``mwpy overseer`` parser."""
        ...

    def create(self, resource_file: str, options: argparse.Namespace) -> Backend:
        """The back end for the computation of ``resource_file`` (which may not exist yet).

        Raise :class:`~mwpy.errors.ConfigurationError` for a wrong option (exit
        status 2) and :class:`~mwpy.errors.BackendError` when the batch system
        cannot be used (exit status 1).
        """
        ...


#: Entry-point group through which installed distributions offer back ends (name = "module:attribute").
ENTRY_POINT_GROUP = "mwpy.backends"
#: The built-in back ends, as import paths: importing htcondor2 takes long, so only a chosen one is imported.
_BUILTIN = {
    "condor": "mwpy.backends.htcondor:CondorBackend",
    "local": "mwpy.backends.local:LocalBackend",
}
_registry: dict[str, BackendFactory | str] = dict(_BUILTIN)


def register(name: str, factory: BackendFactory | str) -> None:
    """Make ``factory`` (or the ``"module:attribute"`` that names it) the back end called ``name``.

    A later registration of the same name replaces the earlier one, so a
    program can swap a built-in back end for its own.
    """
    _registry[name] = factory


def names() -> list[str]:
    """Every back-end name that :func:`lookup` knows, sorted: registered ones and installed entry points."""
    import importlib.metadata  # noqa: PLC0415 - only to list or find an installed back end (20 ms at import)

    found = set(_registry)
    found.update(entry.name for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    return sorted(found)


def lookup(name: str) -> BackendFactory:
    """The factory for a back-end name, an installed entry point, or an import path ``package.module:attr``.

    Raises :class:`~mwpy.errors.ConfigurationError`, whose message is one
    line naming the known back ends, when there is none by that name or its
    path names nothing importable, and :class:`~mwpy.errors.BackendError`
    when its module needs a package that is not installed.
    """
    target = _registry.get(name)
    if target is None:
        import importlib.metadata  # noqa: PLC0415 - the built-in back ends, registered, never need it

        entries = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)
        target = next(iter(entries)).value if entries else None
    if target is None and ":" in name:
        target = name
    if target is None:
        raise ConfigurationError(f"unknown back end {name!r} (known: {', '.join(names())}; or package.module:attr)")
    if isinstance(target, str):
        target = _import(name, target)
    return target


def _import(name: str, path: str) -> BackendFactory:
    """Import ``module:attribute``, with the current folder importable (as uvicorn and gunicorn do)."""
    module_name, _, attribute = path.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name + ".").startswith(exc.name + "."):  # the path names no module: a typo
            raise ConfigurationError(f"back end {name!r}: cannot import {path}: {exc}") from None
        # The module is there but needs what is not installed (htcondor2, say): the machine's problem.
        raise BackendError(f"back end {name!r} cannot be loaded: {exc}") from None
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"back end {name!r}: cannot import {path}: {exc}") from None
    if not (callable(getattr(found, "add_arguments", None)) and callable(getattr(found, "create", None))):
        raise ConfigurationError(f"back end {name!r}: {path} has no add_arguments() and create()")
    return cast(BackendFactory, found)
