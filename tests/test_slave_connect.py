"""What a slave says about itself when it connects, and what it says when the peer is no master.

A slave running as a Condor job reports its job id (from the job ad Condor
names in ``_CONDOR_JOB_AD``) in Hello; the master lists the job ids of its
connected slaves in the resource file (``condor_jobs_connected``), the audit
and the event log, which is how the overseer tells a job whose slave never
connected from one that serves (docs/condor.md). Real slave processes, real
sockets and real files; no Condor pool is needed for this part.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwpy import ExitCode
from mwpy.job_ad import own_job_id as condor_job_id
from mwpy.job_ad import submit_side_path
from mwpy.names import JOB_AD_VARIABLE
from mwpy.observe import events
from mwpy.resource_file import ResourceFile
from mwpy.wire import protocol
from tests.support import PROGRAMS, local_master, spawn_slave
from tests.test_overseer import write_resource

WORKLOAD = PROGRAMS / "workload.py"
#: How a slave refused by its peer ends its one line (docs/exit-codes.md: the status by number and name).
REFUSED_NAMED = "[exit status 5 REFUSED: Condor keeps the job queued]"
AD = 'MyType = "Job"\nClusterId = 41\nProcId = 3\nOwner = "someone"\nCmd = "/usr/bin/python3"\n'


@pytest.mark.parametrize(
    ("ad", "expected"),
    [
        (AD, "41.3"),
        ("ProcId = 0\nClusterId = 1234\n", "1234.0"),
        ("ClusterId = 41\n", ""),  # no ProcId: no id rather than a wrong one
        ('ClusterId = "41; rm -rf /"\nProcId = 3\n', ""),
        ("\xff\xfe not an ad at all", ""),
    ],
    ids=["ad", "reordered", "no-proc", "hostile", "garbage"],
)
def test_the_job_id_comes_from_the_job_ad_and_anything_odd_gives_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ad: str, expected: str
) -> None:
    path = tmp_path / ".job.ad"
    path.write_text(ad, encoding="utf-8")
    monkeypatch.setenv(JOB_AD_VARIABLE, str(path))
    assert condor_job_id() == expected


def test_no_job_ad_or_one_that_is_no_regular_file_gives_no_job_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside Condor there is no ad; a FIFO there is refused unread (it would hang the slave)."""
    monkeypatch.delenv(JOB_AD_VARIABLE, raising=False)
    assert condor_job_id() == ""
    fifo = tmp_path / "fifo.ad"
    os.mkfifo(fifo)
    monkeypatch.setenv(JOB_AD_VARIABLE, str(fifo))
    assert condor_job_id() == ""
    monkeypatch.setenv(JOB_AD_VARIABLE, str(tmp_path / "missing.ad"))
    assert condor_job_id() == ""


@pytest.mark.parametrize(
    ("transfer", "expected"),
    [
        ('"mwpy.pyz,prog.py,resource.json"', "/home/u/run/resource.json"),
        ('"mwpy.pyz, /shared/run/resource.json"', "/shared/run/resource.json"),
        ('"mwpy.pyz,prog.py"', None),  # not transferred: no submit-side file to read
    ],
    ids=["relative", "absolute", "absent"],
)
def test_a_slave_finds_its_resource_file_on_the_submit_machine_from_its_job_ad(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transfer: str, expected: str | None
) -> None:
    """Guards: a Condor slave waiting for a restarted master reads the submit machine's resource file (its
    own is a copy of the old master's): TransferInput's entry, under the submit side's Iwd."""
    path = tmp_path / ".job.ad"
    # As the starter writes it: Iwd is the scratch folder, OrigIwd the submit side's.
    ad = f'{AD}Iwd = "/var/lib/condor/execute/dir_1"\nOrigIwd = "/home/u/run"\nTransferInput = {transfer}\n'
    path.write_text(ad, encoding="utf-8")
    monkeypatch.setenv(JOB_AD_VARIABLE, str(path))
    assert submit_side_path("resource.json") == expected
    monkeypatch.delenv(JOB_AD_VARIABLE)
    assert submit_side_path("resource.json") is None


def test_a_slave_in_a_condor_job_is_published_with_its_job_id_until_it_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: Hello's job id reaches the resource file, ``mwpy status --json``, the audit and the event log.

    Two slaves: one with a job ad (as Condor starts it), one without (started by hand).
    Only the first is listed; once it is gone, the list is empty again.
    """
    ad = tmp_path / ".job.ad"
    ad.write_text(AD, encoding="utf-8")
    log = tmp_path / "events.jsonl"
    with local_master(WORKLOAD, tmp_path, "--mw-events", str(log)) as lm:
        monkeypatch.setenv(JOB_AD_VARIABLE, str(ad))
        in_job = lm.start_slave()
        monkeypatch.delenv(JOB_AD_VARIABLE)
        lm.start_slave()
        record = lm.drive_until(lambda: _both_connected(lm.resource()), "both slaves in the resource file")
        assert record is not None
        assert record.condor_jobs_connected == ["41.3"]
        status = subprocess.run(
            [sys.executable, "-m", "mwpy", "status", str(lm.resource_path), "--json", "--no-condor"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["condor_jobs_connected"] == ["41.3"]
        assert f"pid {in_job.pid}, Condor job 41.3, mwpy" in lm.audit_text()
        in_job.kill()
        lm.drive_until(lambda: lm.resource().condor_jobs_connected == [], "the departed slave's job id gone")
    connected = [event for event in events.read_events(log) if isinstance(event, events.SlaveConnected)]
    assert sorted(str(event.job) for event in connected) == ["41.3", "None"]


def _both_connected(record: ResourceFile) -> ResourceFile | None:
    return record if sum(record.slaves_connected.values()) == 2 and record.condor_jobs_connected else None


# ---------------------------------------------------------------------- a peer that is no master


@pytest.fixture
def impostor() -> Iterator[tuple[int, list[bytes]]]:
    """A listener that accepts and then says what the test puts in the list (nothing, or a challenge)."""
    server = socket.create_server(("127.0.0.1", 0))
    says: list[bytes] = []
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)  # kept open and silent after its one say
            for data in says:
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], says
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize(
    ("challenge", "expected"),
    [
        (False, "no challenge from 127.0.0.1:{port} within 2 s: not an mwpy master?"),
        (True, "no answer from 127.0.0.1:{port} to our proof of membership within 2 s"),
    ],
    ids=["silent", "silent-after-challenge"],
)
def test_a_silent_listener_is_reported_as_such_not_as_a_refused_proof(
    tmp_path: Path, impostor: tuple[int, list[bytes]], challenge: bool, expected: str
) -> None:
    """Guards (issue 11 item 5): a rogue listener's silence is silence, named with the step it happened at."""
    port, says = impostor
    if challenge:
        says.append(protocol.challenge(protocol.new_nonce()))
    rf = tmp_path / "resource.json"
    write_resource(rf, needed=1, master_port=port, secret="ab" * 32)
    slave = spawn_slave(WORKLOAD, tmp_path, "--mw-client-timeout", "2", resource=rf)
    assert slave.wait(60) == ExitCode.REFUSED
    err = slave.err().strip()
    assert err.splitlines() == [f"workload.py: {expected.format(port=port)} {REFUSED_NAMED}"], err
    assert "refused our proof" not in err
