"""A slave's state in its own Condor job ad and user log, over Chirp (issue 24).

``condor_q`` shows every slave job as Running, whether it computes or waits;
with these attributes ``condor_q -af MwpyState MwpyTasksDone`` (and
``condor_watch_q``, and a site's idle-pilot policy) see what each pilot does:

* ``MwpyState``: ``"connecting"``, ``"working"`` (a task runs or waits in its
  window), ``"idle"`` (connected, nothing to do) or ``"draining"`` (leaving);
* ``MwpyTasksDone``: results the slave has sent;
* ``MwpyLastTaskTime``: Unix time a result was last seen sent (sampled);
* ``MwpyMaster``: ``"host:port"`` of the master it serves.

The state is sampled every ``INTERVAL`` seconds on a thread of its own and
only changed attributes are sent, so a slave running thousands of short tasks
costs the schedd a few updates a minute. Updates are delayed ones
(``set_job_attr_delayed``: they ride on the starter's next update to the
shadow) when the pool lets names starting with ``Mwpy`` through
(``CHIRP_DELAYED_UPDATE_PREFIX``, default ``Chirp*``, which the starter
passes in the job's environment); otherwise immediate ones, which need
``+WantIOProxy = true`` (every slave job has it). Connect and leave lines go
to the job's user log (``ulog``). Outside Condor, or when Chirp is not there,
nothing is published and the slave works the same.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import threading
import time
from collections.abc import Callable
from typing import Any

#: Seconds between two samples of the slave's state.
INTERVAL = 5.0
#: The file the starter writes for Chirp clients, and the variable that names it.
CONFIG_VARIABLE = "_CONDOR_CHIRP_CONFIG"
#: The attribute-name patterns the starter accepts for delayed updates (its CHIRP_DELAYED_UPDATE_PREFIX).
PREFIX_VARIABLE = "_CHIRP_DELAYED_UPDATE_PREFIX"
#: Seconds a Chirp call may take before it is given up (the slave's work never waits on it).
TIMEOUT = 10.0

#: What :meth:`Chirp.follow` samples: the slave's state ("working", ...) and its results sent.
Sample = Callable[[], tuple[str, int]]


class Chirp:
    """Publishes one slave's state into its job ad; every failure only stops the publishing."""

    def __init__(self, client: Any, master: str) -> None:
        self._client = client
        self._master = master
        self._lock = threading.Lock()
        self._sent: dict[str, str] = {}
        self._done = 0
        self._last_task: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sample: Sample = lambda: ("connecting", 0)  # what follow() samples
        self.delayed = delayed_updates_allowed(os.environ.get(PREFIX_VARIABLE, ""))

    @classmethod
    def open(cls, master: str) -> Chirp:
        """A publisher for this job; one that publishes nothing outside Condor or without a Chirp proxy."""
        return cls(_client(), master)

    def publish(self, state: str, done: int) -> None:
        """Send the attributes that changed since the last call."""
        with self._lock:
            if done > self._done:
                self._done, self._last_task = done, time.time()
            values = {"MwpyState": f'"{state}"', "MwpyTasksDone": str(done), "MwpyMaster": f'"{self._master}"'}
            if self._last_task is not None:
                values["MwpyLastTaskTime"] = str(int(self._last_task))
            changed = {name: value for name, value in values.items() if self._sent.get(name) != value}
            for name, value in changed.items():
                if not self._call("set_job_attr_delayed" if self.delayed else "set_job_attr", name, value):
                    return
                self._sent[name] = value

    @property
    def done(self) -> int:
        """Results the slave had sent at the last sample."""
        return self._done

    def log(self, text: str) -> None:
        """One line in the job's user log (a generic event), e.g. that the slave connected or leaves."""
        with self._lock:
            self._call("ulog", text)

    def fetch(self, remote: str, local: str) -> bool:
        """Copy the file ``remote`` of the submit machine to ``local`` here (replaced whole, never half
        written); whether it was copied. Each fetch has a connection of its own: one that failed while the
        job's shadow was away (a schedd restart) ended the publishing, but the next shadow serves a fetch."""
        client = _client()
        if client is None:
            return False
        partial = f"{local}.fetching"
        try:
            client.fetch(remote, partial)
            os.replace(partial, local)
        except Exception:  # no such file there, the shadow away: the old copy stays
            with contextlib.suppress(OSError):
                os.unlink(partial)
            return False
        finally:
            with contextlib.suppress(Exception):
                client.disconnect()
        return True

    def follow(self, sample: Sample) -> None:
        """Publish ``sample()`` every ``INTERVAL`` seconds on a thread of its own, until :meth:`close`; a later
        call (a slave that connected to a restarted master) replaces what is sampled."""
        self._sample = sample
        if self._client is None or self._thread is not None:
            return

        def run() -> None:
            while not self._stop.wait(INTERVAL):
                self.publish(*self._sample())

        self._thread = threading.Thread(target=run, name="mwpy-chirp", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(TIMEOUT)
        with self._lock, contextlib.suppress(Exception):
            if self._client is not None:
                self._client.disconnect()

    def _call(self, method: str, *args: str) -> bool:
        """One Chirp call; False (and no more calls) once one failed."""
        if self._client is None:
            return False
        try:
            getattr(self._client, method)(*args)
        except Exception:  # the proxy went away, or refused: stop publishing, keep working
            self._client = None
            return False
        return True


def _client() -> Any:
    """A connected Chirp client of this job's starter, or None: outside Condor, or no proxy, a refused cookie,
    an old htchirp (the slave works the same)."""
    config = os.environ.get(CONFIG_VARIABLE)
    if not config or not os.path.isfile(config):
        return None
    try:
        import htchirp  # noqa: PLC0415 (only slaves that run as Condor jobs need it)

        client = htchirp.HTChirp(timeout=TIMEOUT)
        client.connect()
    except Exception:
        return None
    return client


def delayed_updates_allowed(prefixes: str) -> bool:
    """Whether the starter's CHIRP_DELAYED_UPDATE_PREFIX (comma- or space-separated patterns) lets Mwpy* through."""
    patterns = [item for item in prefixes.replace(",", " ").split() if item]
    return all(any(fnmatch.fnmatch(name.lower(), p.lower()) for p in patterns) for name in _NAMES)


_NAMES = ("MwpyState", "MwpyTasksDone", "MwpyLastTaskTime", "MwpyMaster")
