"""Watching the resource file for rewrites (watchdog), so the overseer reacts within moments of one.

Its own module, imported only once the overseer has made its first
reconciliation (mwpy/overseer.py): watchdog's import and its threads
take a while, and a short script's first slaves should not wait for them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from watchdog.events import (
    EVENT_TYPE_CLOSED,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

_CHANGES = frozenset({EVENT_TYPE_CREATED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED, EVENT_TYPE_CLOSED, EVENT_TYPE_DELETED})


@contextlib.contextmanager
def watching(path: Path, wake: threading.Event, *, poll: float, log: Callable[[str], None]) -> Iterator[None]:
    """Set ``wake`` whenever the file at ``path`` (a real path) is written or renamed into place, until the end.

    With inotify, else (no inotify instance left: a busy host; said through ``log``) by polling the folder
    every ``poll`` seconds: without a watcher at all the overseer's thread died and an Executor waited for
    slaves for ever.
    """
    handler, folder = _Wake(path, wake), str(path.parent)
    try:
        observer = _started(Observer(), handler, folder)
    except OSError as exc:
        log(f"cannot watch {folder} with inotify ({exc}); polling it every {poll:g} s instead")
        observer = _started(PollingObserver(timeout=poll), handler, folder)
    try:
        yield
    finally:
        _stop_quietly(observer)


def _started(observer: BaseObserver, handler: _Wake, folder: str) -> BaseObserver:
    """``observer`` watching ``folder`` (not below it) for ``handler``, its thread started."""
    observer.schedule(handler, folder, recursive=False)
    observer.start()
    return observer


def _stop_quietly(observer: BaseObserver) -> None:
    """Stop the watcher without watchdog's harmless "called when the thread is inactive" error.

    Stopping races the inotify reader thread, which then logs an ERROR (watchdog
    PR 963) that a user of ``mwpy local`` would take for a failure.
    """
    log = logging.getLogger("watchdog.observers.inotify")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        observer.stop()
        observer.join()
    finally:
        log.setLevel(level)


class _Wake(FileSystemEventHandler):
    """Sets an event when the resource file is written or renamed into place."""

    def __init__(self, path: Path, wake: threading.Event) -> None:
        self._path = str(path)
        self._wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        # Only changes wake the overseer: watchdog also reports opens and reads, and the overseer's
        # own reading of the file would otherwise wake it again, forever (a core spent spinning).
        if event.event_type in _CHANGES and self._path in (event.src_path, getattr(event, "dest_path", "")):
            self._wake.set()
