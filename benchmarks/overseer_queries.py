"""Scenario ``overseer-queries`` (issue 24 item 3): the overseer's schedd queries per minute at 100 slave jobs.

An :class:`~mwpy.overseer.Overseer` with the Condor back end keeps 100
slave jobs queued for a resource file that asks for 100 slaves; the jobs run
``/bin/sleep`` (no master: the file only names the command), so on the test
pool's slots some run and the rest wait idle -- the job table the overseer
keeps is 100 jobs either way. It reconciles every ``INTERVAL`` seconds (as
``mwpy overseer``'s default) for 180 s (``Sizes.overseer_seconds``), twice:

* **event log**: the back end follows ``slaves.log`` and queries the schedd
  only to reconcile (``--reconcile-every``, default 300 s);
* **polling**: ``--reconcile-every 0``, a query at every reconciliation (what
  the overseer did before).

Reported: the job-table queries (``CondorBackend.queries["jobs"]``) per minute
of each arm, and their ratio. These are counts, not timings: a loaded machine
does not change them. The file names no master job, so the overseer's look at
the master's job (followed in its own user log the same way) is not in them.

Needs the pool that ``tools/condor_pool.py up`` builds, root and the
``htcondor2`` bindings (else "skipped"); run it under the pool's lock:
``flock /tmp/mwpy-condor.lock python -m benchmarks --scenario overseer-queries``.
``--quick`` runs 20 jobs for 30 s an arm.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

from benchmarks.common import Check, Row, Settings
from benchmarks.condor import backend_missing, pool_description, pool_down

NAME = "overseer queries"
#: Seconds between two reconciliations (``mwpy overseer --interval``'s default).
INTERVAL = 10.0
ARMS = {"event log": None, "polling": 0.0}  # --reconcile-every: None for the default


def run(settings: Settings) -> tuple[list[Row], list[Check]]:
    """Both arms on the pool, or skipped rows saying why not."""
    jobs, duration = settings.sizes.overseer_jobs, settings.sizes.overseer_seconds
    pool, why = pool_description()
    missing = why if pool is None else backend_missing() or pool_down(pool)
    if pool is None or missing is not None:
        return [Row(NAME, arm, skipped=missing) for arm in ARMS], []
    os.environ["CONDOR_CONFIG"] = str(pool["condor_config"])
    import htcondor2  # noqa: PLC0415 - only this scenario needs the bindings

    htcondor2.reload_config()
    rows = [_arm(settings, pool, arm, every, jobs=jobs, duration=duration) for arm, every in ARMS.items()]
    per_minute = [row.extra.get("queries_per_minute") for row in rows]
    follow, poll = per_minute
    ratio = follow / poll if isinstance(follow, float) and isinstance(poll, float) and poll else None
    detail = f"{jobs} slave jobs, a reconciliation every {INTERVAL:g} s for {duration:g} s an arm"
    return rows, [Check("overseer: schedd queries per minute, event log / polling", ratio, "info", None, detail)]


def _arm(
    settings: Settings, pool: dict[str, object], arm: str, every: float | None, *, jobs: int, duration: float
) -> Row:
    """One arm: an overseer for ``duration`` seconds over ``jobs`` sleeping slave jobs, its queries counted."""
    from mwpy import resource_file  # noqa: PLC0415 - the harness imports scenarios before it knows which run
    from mwpy.backends.condor_log import RECONCILE_EVERY  # noqa: PLC0415
    from mwpy.backends.htcondor import CondorBackend  # noqa: PLC0415
    from mwpy.overseer import Limits, Overseer  # noqa: PLC0415

    workdir = Path(str(pool["share"])) / "bench" / f"overseer-queries-{os.getpid()}-{arm.replace(' ', '-')}"
    workdir.mkdir(parents=True, exist_ok=True)
    for path in (workdir.parent, workdir):
        os.chown(path, int(str(pool["uid"])), int(str(pool["gid"])))
    resource = workdir / "resource.json"
    record = resource_file.ResourceFile(
        computation_status="in-progress", timestamp=time.time(), update_interval=3600.0,
        member_id=f"mwpy:{resource}", master_host="127.0.0.1", master_port=1, slaves_needed=jobs,
        slave_executable="/bin/sleep", slave_files=[], slave_arguments=[str(int(duration) + 600)], master_pid=1,
    )  # fmt: skip
    resource_file.write(resource, record)
    os.chmod(resource, 0o644)
    backend = CondorBackend(resource_file=str(resource), reconcile_every=RECONCILE_EVERY if every is None else every)
    overseer = Overseer(resource, backend, Limits(max_jobs=jobs, max_idle=jobs, batch=jobs))
    stop = threading.Event()
    settings.log(f"{NAME}: {arm}, {jobs} jobs for {duration:g} s")
    worker = threading.Thread(target=overseer.run, args=(stop,), kwargs={"interval": INTERVAL}, daemon=True)
    started = time.monotonic()
    worker.start()
    try:
        time.sleep(duration)
    finally:
        stop.set()
        overseer.wake()
        worker.join(60)
        elapsed = time.monotonic() - started
        queries = backend.queries["jobs"]
        kept = [job.job_id for job in backend.jobs()]
        backend.remove(kept)
        backend.close()
        shutil.rmtree(workdir, ignore_errors=True)
    figures = {
        "jobs": len(kept),
        "queries": queries,
        "queries_per_minute": queries / (elapsed / 60),
        "reconciliations_per_minute": 60 / INTERVAL,
        "all_queries": json.dumps(dict(backend.queries)),
    }
    note = f"{queries} job-table queries in {elapsed / 60:.1f} min over {len(kept)} jobs"
    return Row(NAME, arm, tasks=len(kept), seconds=elapsed, note=note, extra=figures)
