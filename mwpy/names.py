"""The names two parts of mwpy (or mwpy and the world around it) must spell alike, in one place.

A file the master writes and ``mwpy local`` or the overseer reads, an
environment variable a user sets, a task name the master sends and a slave
looks up, a ClassAd attribute the back end sets and queries: each is named
here once, so a writer and its reader cannot drift apart (htmap's
``names.py`` is the model). This module imports nothing of mwpy's.
"""

from __future__ import annotations

import re
from typing import Final

# ---------------------------------------------------------------------- files in a work folder
# ``mwpy local`` and ``mwpy.Executor`` keep these in their work folder; a slave sandbox gets the resource file.

#: The resource file (docs/resource-file.md).
RESOURCE_FILE: Final = "resource.json"
#: The master's ``[A]`` audit trail.
AUDIT_FILE: Final = "master.audit"
#: The event log (``--mw-events``; docs/observability.md).
EVENTS_FILE: Final = "events.jsonl"
#: The slave bundle: mwpy and its pure-Python dependencies in one zipapp (``--mw-slave-bundle``, ``mwpy bundle``).
BUNDLE_FILE: Final = "mwpy.pyz"
#: The copy of ``mwpy/_spawn.py`` an Executor ships to a batch system's slaves.
SPAWN_COPY: Final = "mwpy_spawn.py"
#: An Executor's ``initializer`` and ``initargs``, pickled for its slaves (``mwpy/_spawn.py`` runs it).
INITIALIZER_FILE: Final = "mwpy_initializer.pickle"
#: The computation's secret for the local slaves an Executor starts before its master exists (``--mw-secret-file``).
SLAVE_SECRET_FILE: Final = "slave.secret"
#: The caller's ``multiprocessing`` authkey, for an Executor's local slaves (its Manager() proxies work there).
AUTHKEY_FILE: Final = "multiprocessing.authkey"
#: Files SQLite keeps next to the journal (``--mw-journal``) in WAL mode: the journal's suffix and these.
JOURNAL_SIDE_FILES: Final = ("-wal", "-shm")
#: Set in the user's script module while an Executor's slave loads it (mwpy/_spawn.py): mwpy.Executor() refuses
#: to start then, as multiprocessing's spawn does, or every slave would start slaves without end.
SLAVE_LOADING_MARK: Final = "__mwpy_slave_loading__"
#: What a local slave wrote on its stdout and stderr, in its sandbox.
SLAVE_STDOUT: Final = "slave.out"
SLAVE_STDERR: Final = "slave.err"
#: The user log of an overseer's Condor slave jobs (``log =`` of submit/slaves.sub), beside the resource file.
SLAVES_LOG: Final = "slaves.log"
#: How local slaves that exited non-zero ended, one ``HOST PID STATUS`` line each (mwpy/slave_exits.py).
SLAVE_EXITS: Final = "slave-exits"
#: Slaves the master dropped as silent (client timeout), one ``HOST PID`` line each: the local back end that
#: started them kills them (mwpy/slave_exits.py).
SLAVE_DROPS: Final = "slave-drops"

# ---------------------------------------------------------------------- sockets

#: The master's listen backlog: slaves that connect while it is busy (or, an Executor's, before it exists:
#: mwpy/executor.py makes the socket the master then takes) wait there.
MASTER_BACKLOG: Final = 1024

# ---------------------------------------------------------------------- environment variables

#: The ``mwpy`` logger's level when no ``--mw-log-level`` is given (an Executor user passes no options).
LOG_LEVEL_VARIABLE: Final = "MWPY_LOG_LEVEL"
#: Condor names the file holding the job's ClassAd in this variable: where a slave learns its job id.
JOB_AD_VARIABLE: Final = "_CONDOR_JOB_AD"
#: ... and the slot's machine ad in this one: what a slave offers (its Cpus, Memory, Disk, GPUs), and when a
#: glidein it runs in ends (GLIDEIN_ToDie, mwpy/lifetime.py).
MACHINE_AD_VARIABLE: Final = "_CONDOR_MACHINE_AD"

# ---------------------------------------------------------------------- built-in task algorithms
# The tasks mwpy itself submits (mwpy/calls.py); a user's task may not take these names.

#: ``Executor.submit`` of an object that is not a plain function (a partial, a callable instance).
CALL: Final = "mwpy.call"
#: ``Executor.submit`` of a plain function, pickled once and looked up once per slave.
CALL_FUNCTION: Final = "mwpy.call_function"
#: A value a slave holds, sent by that slave to the master's file service (another slave could not fetch it).
RELAY: Final = "mwpy.relay_held"
#: ``Executor.map(..., chunksize=n)``: one task, n calls.
CALL_CHUNK: Final = "mwpy.call_chunk"
#: ``mw.map(..., chunksize=n)``: one task, n calls of a task algorithm.
MAP_CHUNK: Final = "mwpy.map_chunk"

# ---------------------------------------------------------------------- HTCondor

#: The job attribute that ties a job to its computation (its member id).
MEMBER_ATTRIBUTE: Final = "MwpyMemberId"
#: The job attribute that says what a job is: "slave", "master" or "overseer".
ROLE_ATTRIBUTE: Final = "MwpyRole"
#: The job attribute naming the need a slave job was submitted for (``str(Resources)``): the overseer counts
#: its jobs per shape by it, and the slave reports that need's requirements as its own (mwpy/resources.py).
SHAPE_ATTRIBUTE: Final = "MwpyShape"
#: A Condor job id as slaves report it and the resource file lists it: ``CLUSTER.PROC``.
CONDOR_JOB_ID: Final = re.compile(r"[0-9]{1,10}\.[0-9]{1,10}")
#: Bytes: more memory than a slave can have (64 TiB: the largest single machines hold 32 to 48 TiB, and
#: x86-64 processors address 2^46 to 2^52 bytes). A Heartbeat claiming more is refused, and a resource file
#: listing more is not read: the master publishes the largest peak, and the overseer asks Condor for that
#: much for every new slave job.
MAX_PEAK_MEMORY: Final = 1 << 46
