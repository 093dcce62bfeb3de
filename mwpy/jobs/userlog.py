"""The job event log (``log = FILE``) in HTCondor's own user-log format.

Tools that watch a Condor log (``condor_wait``, ``htcondor2.JobEventLog``,
DAGMan-style scripts) keep working on an ``mwpy jobs`` run. Each event is
written as ``condor_event.cpp`` formats it (``ULogEvent::formatHeader`` and
the event's ``formatBody``): a header ``NNN (CCC.PPP.000) YYYY-MM-DD
HH:MM:SS`` in local time, the body, and the ``...`` line that ends every
event. mwpy writes the events a job's life has: submitted (000), executing
(001), evicted and requeued (004), terminated (005), aborted (009), held (012)
and released (013); not the file-transfer (040-045, 047) and image-size (006) events
of Condor's starter. Each event is one ``write`` in append mode, so a reader
never sees half of one.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time

from mwpy.jobs.policy import Decision, Exit

#: The "host" events name: the submit side of an mwpy jobs run (Condor gives the schedd's sinful string).
SUBMIT_HOST = "<127.0.0.1:0?alias=mwpy-jobs>"


def _header(number: int, cluster: int, process: int, when: float) -> str:
    moment = time.localtime(when)
    return f"{number:03d} ({cluster:03d}.{process:03d}.000) {time.strftime('%Y-%m-%d %H:%M:%S', moment)} "


def _line(text: str) -> str:
    """One line of an event's body: text from a policy expression may not start a new line or event."""
    return " ".join(text.split())


def _rusage(seconds: float) -> str:
    """``formatRusage``: ``Usr D HH:MM:SS`` for user time (mwpy records no system time apart)."""
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days} {hours:02d}:{minutes:02d}:{secs:02d}"


def _usage(user: float, system: float) -> str:
    return f"Usr {_rusage(user)}, Sys {_rusage(system)}"


def _termination(run: Exit) -> str:
    if run.signal is not None:
        return f"\t(0) Abnormal termination (signal {run.signal})\n\t(0) No core file\n"
    return f"\t(1) Normal termination (return value {run.exit_code})\n"


class UserLog:
    """Appends a job's events to its ``log`` file.

    A job's submitted event is written once per log: a master that Condor restarts (and that answers the
    finished jobs from its journal) does not submit them again, and ``condor_wait``, which counts submitted
    jobs against terminated ones, would wait for ever on a second one.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._submitted: set[tuple[int, int]] | None = None  # read from the file on the first submit
        #: Its folder is not there when the first job is made: Condor writes no event to such a log (not even
        #: once the file transfer has made the folder for the outputs), and neither does mwpy; a note says so.
        self.missing = not os.path.isdir(os.path.dirname(path))
        if self.missing:
            print(f"mwpy jobs: note: the folder of the log {path} does not exist: no events are written to it, "
                  "as Condor writes none", file=sys.stderr)  # fmt: skip

    def _already_submitted(self, cluster: int, process: int) -> bool:
        if self._submitted is None:
            self._submitted = set()
            with contextlib.suppress(OSError), open(self.path, "rb") as existing:
                for line in existing:
                    if line.startswith(b"000 ("):
                        found = re.match(rb"000 \((\d+)\.(\d+)\.", line)
                        if found is not None:
                            self._submitted.add((int(found[1]), int(found[2])))
        return (cluster, process) in self._submitted  # this master makes each job once: only older ones count

    def _write(self, text: str) -> None:
        if self.missing:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (text + "...\n").encode())
        finally:
            os.close(fd)

    def submitted(self, cluster: int, process: int, when: float, notes: str = "") -> None:
        if self._already_submitted(cluster, process):
            return
        body = f"Job submitted from host: {SUBMIT_HOST}\n" + (f"    {_line(notes)}\n" if notes else "")
        self._write(_header(0, cluster, process, when) + body)

    def executing(self, cluster: int, process: int, when: float, host: str, slot: str) -> None:
        body = f"Job executing on host: <{_line(host)}:0?alias={_line(host)}>\n\tSlotName: {_line(slot)}\n"
        self._write(_header(1, cluster, process, when) + body)

    def terminated(self, cluster: int, process: int, when: float, run: Exit, total: Exit) -> None:
        """005: the job exited and leaves the queue."""
        body = (
            "Job terminated.\n"
            + _termination(run)
            + f"\t\t{_usage(run.user_cpu, run.sys_cpu)}  -  Run Remote Usage\n"
            + f"\t\t{_usage(0, 0)}  -  Run Local Usage\n"
            + f"\t\t{_usage(total.user_cpu, total.sys_cpu)}  -  Total Remote Usage\n"
            + f"\t\t{_usage(0, 0)}  -  Total Local Usage\n"
            + "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n"
            + "\t0  -  Total Bytes Sent By Job\n\t0  -  Total Bytes Received By Job\n"
        )
        self._write(_header(5, cluster, process, when) + body)

    def requeued(self, cluster: int, process: int, when: float, run: Exit, decision: Decision) -> None:
        """004: the job exited, but its on_exit_remove was false: it runs again."""
        body = (
            "Job was evicted.\n\t(0) Job terminated and was requeued\n"
            + f"\t\t{_usage(run.user_cpu, run.sys_cpu)}  -  Run Remote Usage\n"
            + f"\t\t{_usage(0, 0)}  -  Run Local Usage\n"
            + "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n"
            + _termination(run)
            + f"\t{_line(decision.reason)}\n"
        )
        self._write(_header(4, cluster, process, when) + body)

    def not_executed(self, cluster: int, process: int, when: float, decision: Decision) -> None:
        """021 and 004: the starter's error, then the eviction that precedes the hold (as Condor writes them)."""
        reason = _line(decision.reason)
        starter = re.search(r"Error from ([^:]*): (.*)", reason)  # the execute side's words within the reason
        where, message = (starter[1], starter[2]) if starter is not None else ("", reason)
        error = f"Error from starter on {where}:\n\t{message}\n\tCode {decision.code} Subcode {decision.subcode}\n"
        self._write(_header(21, cluster, process, when) + error)
        body = (
            "Job was evicted.\n\t(0) CPU times\n"
            + f"\t\t{_usage(0, 0)}  -  Run Remote Usage\n"
            + f"\t\t{_usage(0, 0)}  -  Run Local Usage\n"
            + "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n"
            + f"\t{reason}\n"
        )
        self._write(_header(4, cluster, process, when) + body)

    def held(self, cluster: int, process: int, when: float, decision: Decision) -> None:
        body = f"Job was held.\n\t{_line(decision.reason) or 'Reason unspecified'}\n"
        self._write(_header(12, cluster, process, when) + body + f"\tCode {decision.code} Subcode {decision.subcode}\n")

    def released(self, cluster: int, process: int, when: float, decision: Decision) -> None:
        self._write(_header(13, cluster, process, when) + f"Job was released.\n\t{_line(decision.reason)}\n")

    def aborted(self, cluster: int, process: int, when: float, decision: Decision) -> None:
        self._write(_header(9, cluster, process, when) + f"Job was aborted.\n\t{_line(decision.reason)}\n")
