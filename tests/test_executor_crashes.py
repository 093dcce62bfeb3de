"""Other executors' crash matrices, run against ``mwpy.Executor`` and the master API (issue 21, items 1 and 6).

Sources, read and rewritten (not copied):

* loky ``tests/test_reusable_executor.py`` at 9b13aaeac017
  (``TestExecutorDeadLock``: ``crash_cases``, ``test_in_callback_submit_with_crash``,
  ``test_callback_crash_on_submit``, ``test_deadlock_kill``, ``test_crash_races``,
  ``test_imap_handle_iterable_exception``, ``test_queue_full_deadlock``,
  ``test_informative_error_when_fail_at_unpickle``; ``TestTerminateExecutor``:
  ``test_shutdown_deadlock``, ``test_call_item_gc_crash_or_exit``);
* CPython ``Lib/test/test_concurrent_futures/test_deadlock.py`` at 1b2e7aadfd0b
  (``ExecutorDeadlockTest``: the crash cases that tests/test_executor_stdlib.py
  left to issue 21 item 1, ``test_shutdown_deadlock``, ``test_crash_big_data``);
* dask.distributed ``distributed/tests/test_failed_workers.py`` at 014ed0753ac4
  (``test_broken_worker_during_computation``: workers killed twice while a
  large computation runs; the result is still right; ``test_worker_ttl_restarts_worker``
  with ``block_evloop``: a task that blocks its worker's event loop, dropped as
  silent, SIGKILLed by its nanny, counted against the task).

What mwpy does where they expect ``BrokenProcessPool`` or loky's
``TerminatedWorkerError``: a call that kills its slave (a segfault, libc's
``exit``, at any step of the call on the slave) runs again on another slave
until more than its allowed failures died running it, then fails alone with
``mwpy.KilledSlaveError`` naming the function and how each slave ended; the
executor goes on (README, "Where mwpy differs from ProcessPoolExecutor on
purpose"). Most tests set ``--mw-allowed-failures 0`` so one death decides,
as one crash decides in the sources. loky's memory-leak and worker-recycling
tests are not adapted: mwpy has no per-slave memory limit or task count (its
slaves retire by time, ``--mw-slave-lifetime``, tested in test_lifetime.py).

Each test has its own executor (CPython's ``_check_error`` makes a fresh pool
per case too), a deadline on every wait and a per-test timeout, so a hang
fails the test instead of blocking the suite.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import mwpy
from tests.programs import crash_work as crash
from tests.programs import executor_stdlib_work as work
from tests.support import run_local, wait_until

#: How long a result may take on a slow, loaded machine (slaves that died are restarted after a back-off).
RESULT_TIMEOUT = 90.0
#: One death decides, as one crash does in loky's and CPython's tests.
ONE_DEATH = ["--mw-allowed-failures", "0"]

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def executor() -> Iterator[mwpy.Executor]:
    """Two slaves, one death allowed per call; leaving must return (loky and CPython fail on a hang there)."""
    with mwpy.Executor(max_workers=2, options=ONE_DEATH) as ex:
        yield ex


def squares_still_come(ex: mwpy.Executor) -> None:
    """The rest goes on: calls after the crash all come back, each once, in order."""
    assert list(ex.map(work.mul, range(8), range(8), timeout=RESULT_TIMEOUT)) == [i * i for i in range(8)]


def killed(future: cf.Future[Any]) -> mwpy.KilledSlaveError:
    with pytest.raises(mwpy.KilledSlaveError) as caught:
        future.result(timeout=RESULT_TIMEOUT)
    return caught.value


SIGSEGV = "killed by SIGSEGV"
EXIT_0 = "exited with status 0 without a result"

#: (case, function, arguments, how the slave ended): loky's crash_cases and CPython's ExecutorDeadlockTest crash
#: tests, at each step of a call on the slave.
KILLING_CALLS: list[tuple[str, Callable[..., Any], tuple[Any, ...], str]] = [
    ("segfault unpickling the arguments", id, (crash.CrashAtUnpickle(),), SIGSEGV),
    ("libc exit unpickling the arguments", id, (crash.CExitAtUnpickle(),), EXIT_0),
    ("segfault in the function", crash.segfault, (), SIGSEGV),
    ("libc exit in the function", crash.c_exit, (), EXIT_0),
    ("segfault pickling the result", work.return_instance, (crash.CrashAtPickle,), SIGSEGV),
    ("libc exit pickling the result", work.return_instance, (crash.CExitAtPickle,), EXIT_0),
    ("segfault freeing the arguments", id, (crash.CrashAtGC(),), SIGSEGV),
    ("libc exit freeing the arguments", id, (crash.CExitAtGC(),), EXIT_0),
]


@pytest.mark.parametrize(("case", "fn", "args", "ended"), KILLING_CALLS, ids=[c[0] for c in KILLING_CALLS])
def test_a_call_that_kills_its_slave_fails_alone_naming_how_it_ended(
    executor: mwpy.Executor, case: str, fn: Callable[..., Any], args: tuple[Any, ...], ended: str
) -> None:
    """loky TestExecutorDeadLock.test_crashes (crash_cases); CPython ExecutorDeadlockTest.test_crash_at_task_unpickle,
    test_crash_during_func_exec_on_worker, test_crash_during_result_pickle_on_worker; loky
    TestTerminateExecutor.test_call_item_gc_crash_or_exit.

    loky and CPython expect ``TerminatedWorkerError``/``BrokenProcessPool``
    (the pool breaks); mwpy fails that call with ``KilledSlaveError`` and the
    executor goes on. libc's ``exit(0)`` is named for its status 0, not as a
    lost connection. A crash while the slave frees the call's arguments is
    the call's (loky's worker has sent the result by then; mwpy's slave
    frees them first), so that call fails too.
    """
    before = executor.submit(work.mul, 6, 7)
    doomed = executor.submit(fn, *args)
    error = killed(doomed)
    assert error.function == getattr(fn, "__name__", "")  # the user's function, not mwpy's carrier
    [death] = error.deaths
    assert death.endswith(ended), death
    assert str(error).startswith(f"{error.function} killed 1 slaves that ran it (allowed failures: 0)")
    assert before.result(timeout=RESULT_TIMEOUT) == 42
    squares_still_come(executor)


def test_sys_exit_zero_in_the_function_raises_system_exit_zero(executor: mwpy.Executor) -> None:
    """loky crash_cases ``(exit, (), SystemExit, None)``: ``sys.exit(0)`` (CPython's test uses status 1).

    Not a death: the slave catches it as the call's outcome (README), so even
    with no death allowed the call raises ``SystemExit`` with its code.
    """
    with pytest.raises(SystemExit) as caught:
        executor.submit(crash.sys_exit_zero).result(timeout=RESULT_TIMEOUT)
    assert caught.value.code == 0
    squares_still_come(executor)


def test_an_argument_that_exits_while_pickled_raises_from_submit(executor: mwpy.Executor) -> None:
    """loky crash_cases ``(id, (ExitAtPickle(),), PicklingError, None)``.

    ``submit()`` pickles at once in the caller's thread (README), so the
    ``SystemExit`` raised by the argument's ``__reduce__`` reaches the caller
    there, as ``pickle.dumps`` would give it; loky's queue thread turns it
    into a ``PicklingError``. Nothing of the call is left behind.
    """
    with pytest.raises(SystemExit):
        executor.submit(id, work.ExitAtPickle())
    squares_still_come(executor)


def test_an_error_unpickling_an_argument_is_raised_with_its_message(executor: mwpy.Executor) -> None:
    """loky test_informative_error_when_fail_at_unpickle: the slave's error, type and message, reaches the caller.

    loky raises ``BrokenProcessPool`` with the error as its cause; mwpy's
    call raises the error itself (README).
    """
    future = executor.submit(id, crash.ErrorAtUnpickle(RuntimeError, "message raised in child"))
    with pytest.raises(RuntimeError, match="message raised in child"):
        future.result(timeout=RESULT_TIMEOUT)
    squares_still_come(executor)


def test_one_call_that_kills_its_slave_among_pipelined_calls_fails_alone() -> None:
    """The crash of a map (CPython test_crash_big_data's ``map`` of crashing calls; dask's KilledWorker).

    Slaves that know their calls are quick hold many in flight, and keep a
    finished call's result a moment to send it with the next one, so when
    one dies the master cannot tell which of its calls killed it. Before,
    the first in flight was blamed: with one death allowed an innocent call
    failed, and the guilty one, blamed for nothing, killed slave after slave
    (24 deaths and 221 s for one crashing call in 40). Now every call the
    slave held runs again alone, where a death is surely its own.
    """
    with mwpy.Executor(max_workers=2, options=ONE_DEATH) as ex:
        squares_still_come(ex)
        assert sum(ex.map(work.mul, range(400), range(400), timeout=RESULT_TIMEOUT)) > 0  # windows grow
        futures = [ex.submit(crash.square_unless, x, 150) for x in range(300)]
        error = killed(futures[150])
        for x, future in enumerate(futures):
            if x != 150:
                assert future.result(timeout=RESULT_TIMEOUT) == x * x, x
    assert error.function == "square_unless"
    alone = [death for death in error.deaths if "other tasks too" not in death]
    [death] = alone  # the deaths that held other calls too are listed, but only this one counted
    assert death.endswith(SIGSEGV), error.deaths
    assert str(error).startswith("square_unless killed 1 slaves that ran it (allowed failures: 0)")


def test_shutdown_returns_while_a_call_kills_its_slaves() -> None:
    """CPython ExecutorDeadlockTest.test_shutdown_deadlock (loky TestTerminateExecutor.test_shutdown_deadlock).

    A call that crashes its slave after ``shutdown(wait=True)`` began: the
    shutdown returns and the call's future raises. CPython expects
    ``BrokenProcessPool``; mwpy runs it again up to the default bound (3)
    and then raises ``KilledSlaveError``.
    """
    with mwpy.Executor(max_workers=2) as ex:
        future = ex.submit(crash.segfault)
        wait_until(future.running, RESULT_TIMEOUT, "the call to start")
        ex.shutdown(wait=True)
        assert future.done()
        error = future.exception()
        assert isinstance(error, mwpy.KilledSlaveError)
        assert len(error.deaths) == 4


def test_a_map_of_calls_that_all_crash_raises_instead_of_hanging() -> None:
    """CPython ExecutorDeadlockTest.test_crash_big_data: each call carries a 1 MiB argument and crashes.

    ``list(map(...))`` raises (``KilledSlaveError`` where CPython has
    ``BrokenProcessPool``) and leaving the ``with`` block returns: breaking
    out of ``map`` cancels the calls not started.
    """
    data = "a" * (1 << 20)
    with (
        mwpy.Executor(max_workers=2, options=ONE_DEATH) as ex,
        pytest.raises(mwpy.KilledSlaveError, match=r"^square_unless killed 1 slaves"),
    ):
        list(ex.map(crash.square_unless, [data] * 10, [data] * 10, timeout=RESULT_TIMEOUT))


@pytest.mark.parametrize(("fn", "args"), [(id, (crash.CrashAtUnpickle(),)), (crash.segfault, ())])
def test_a_killing_call_submitted_from_a_done_callback(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """loky TestExecutorDeadLock.test_in_callback_submit_with_crash: the callback runs on the executor's thread."""
    with mwpy.Executor(max_workers=2, options=ONE_DEATH) as ex:
        submitted: list[cf.Future[Any]] = []
        first = ex.submit(work.mul, 6, 7)
        first.add_done_callback(lambda _: submitted.append(ex.submit(fn, *args)))
        assert first.result(timeout=RESULT_TIMEOUT) == 42
        wait_until(lambda: submitted, RESULT_TIMEOUT, "the callback to submit")
        killed(submitted[0])
        squares_still_come(ex)


def test_a_done_callback_that_exits_or_raises_does_not_break_the_executor(caplog: pytest.LogCaptureFixture) -> None:
    """loky TestExecutorDeadLock.test_callback_crash_on_submit: a callback calls ``sys.exit()``, another raises.

    Callbacks of an mwpy future run on the executor's own thread; a
    ``SystemExit`` there ended it, and every call raised ``BrokenExecutor``
    ("the mwpy executor stopped: 3"). Now it is logged as ``Future`` logs a
    callback's exception, and the executor goes on.
    """
    caplog.set_level(logging.ERROR, logger="concurrent.futures")
    with mwpy.Executor(max_workers=2) as ex:
        exits = ex.submit(work.mul, 6, 7)
        exits.add_done_callback(lambda _: sys.exit(3))
        assert exits.result(timeout=RESULT_TIMEOUT) == 42
        raises = ex.submit(work.mul, 6, 7)
        raises.add_done_callback(lambda _: work.raise_error(RuntimeError))
        assert raises.result(timeout=RESULT_TIMEOUT) == 42
        squares_still_come(ex)
    logged = [record for record in caplog.records if record.getMessage().startswith("exception calling callback")]
    assert [type(record.exc_info[1]) for record in logged if record.exc_info] == [SystemExit, RuntimeError]


def test_an_idle_slave_killed_from_outside_loses_nothing() -> None:
    """loky TestExecutorDeadLock.test_deadlock_kill: SIGKILL a worker that has nothing to do.

    loky's executor breaks (``TerminatedWorkerError``); mwpy's next calls run
    on the other slave and the one started in its place, every one once.
    """
    with mwpy.Executor(max_workers=2) as ex:
        pids = {ex.submit(work.slave_pid).result(timeout=RESULT_TIMEOUT) for _ in range(8)}
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        squares_still_come(ex)
        assert list(ex.map(work.mul, range(50), [2] * 50, timeout=RESULT_TIMEOUT)) == [2 * i for i in range(50)]


def test_a_busy_slave_killed_from_outside_runs_its_call_again(tmp_path: Path) -> None:
    """loky TestExecutorDeadLock.test_crash_races (a task SIGKILLs its neighbours while they work).

    loky raises ``TerminatedWorkerError``; under mwpy's default bound (3) one
    death is allowed to a call, so the call the killed slave ran runs again on
    another and its future gets that one result. (Under
    ``--mw-allowed-failures 0`` it would fail: a kill from outside and a crash
    look the same to the master.)
    """
    gate = str(tmp_path / "gate")
    with mwpy.Executor(max_workers=2) as ex:
        future = ex.submit(crash.started_then_gated, str(tmp_path), gate)
        first = wait_until(lambda: list(tmp_path.glob("started-*")), RESULT_TIMEOUT, "the call to start")
        victim = int(first[0].name.removeprefix("started-"))
        assert ex.submit(crash.kill, victim).result(timeout=RESULT_TIMEOUT) == victim
        wait_until(lambda: len(list(tmp_path.glob("started-*"))) == 2, RESULT_TIMEOUT, "the call to run again")
        Path(gate).touch()
        survivor = future.result(timeout=RESULT_TIMEOUT)
        assert survivor != victim
        assert (tmp_path / f"started-{survivor}").exists()
        squares_still_come(ex)


def test_slaves_killed_twice_during_a_map_lose_and_repeat_no_result() -> None:
    """dask test_broken_worker_during_computation: slaves killed (SIGKILL) twice while 300 calls are under way.

    Under the default bound the calls each killed slave held run again (alone,
    since which one was running is not known) and every call's result comes,
    right and once: ``map`` yields one value per input, in order.
    """
    with mwpy.Executor(max_workers=2) as ex:
        futures = [ex.submit(crash.nap_and_pid, x, 0.005) for x in range(300)]

        def done(count: int) -> Callable[[], bool]:
            return lambda: sum(f.done() for f in futures) >= count

        for done_before_kill in (50, 150):
            wait_until(done(done_before_kill), RESULT_TIMEOUT, f"{done_before_kill} calls to finish")
            latest = max((f for f in futures if f.done()), key=lambda f: f.result()[0])
            os.kill(latest.result()[1], signal.SIGKILL)  # a slave that is running calls of the map now
        assert [f.result(timeout=RESULT_TIMEOUT)[0] for f in futures] == list(range(300))


@pytest.mark.parametrize(("when", "chunksize"), [(3, 1), (7, 2), (7, 4)])
def test_map_raises_the_error_of_its_iterable(when: int, chunksize: int) -> None:
    """loky TestExecutorDeadLock.test_imap_handle_iterable_exception: ``map`` raises what its input raises."""

    class SayWhenError(ValueError):
        pass

    def inputs() -> Iterator[int]:
        for i in range(20):
            if i == when:
                raise SayWhenError("Somebody said when")
            yield i

    with mwpy.Executor(max_workers=2) as ex:
        with pytest.raises(SayWhenError):
            ex.map(work.mul, inputs(), inputs(), chunksize=chunksize)
        squares_still_come(ex)


def test_failed_pickles_do_not_clog_the_queue(executor: mwpy.Executor) -> None:
    """loky TestExecutorDeadLock.test_queue_full_deadlock: 100 calls that fail to pickle, then 100 that do not.

    mwpy pickles in ``submit()`` (README): the failures raise there and leave
    nothing queued; every good call comes back.
    """
    for _ in range(100):
        with pytest.raises(pickle.PicklingError):
            executor.submit(work.capture, crash.ErrorAtPickle(True))
    good = [executor.submit(work.capture, crash.ErrorAtPickle(False)) for _ in range(100)]
    assert [future.result(timeout=RESULT_TIMEOUT) for future in good] == [((42,), {})] * 100


MASTER_PROGRAM = """\
    import pickle
    import sys

    import mwpy


    def fail(kind, message):
        raise kind(message)


    class ErrorAtPickle:
        def __reduce__(self):
            raise pickle.PicklingError("no pickling this")


    class ErrorAtUnpickle:
        def __reduce__(self):
            return fail, (pickle.UnpicklingError, "no unpickling this")


    class ExitAtUnpickle:
        def __reduce__(self):
            return sys.exit, (7,)


    KINDS = {"pickle": ErrorAtPickle, "unpickle": ErrorAtUnpickle, "exit": ExitAtUnpickle}


    @mwpy.task
    def make(kind):
        return KINDS[kind]() if kind in KINDS else kind


    @mwpy.master
    def main(mw, argv):
        for kind in argv:
            make.with_policy(tag=kind).submit(kind)
        results = []
        while len(results) < len(argv):
            mw.loop()
            results += mw.results()
        for result in sorted(results, key=lambda r: r.tag):
            print(result.tag, "->", result.value if result.ok else f"{result.error.type}: {result.error.message}")
        return 0


    if __name__ == "__main__":
        mwpy.run()
"""


def test_the_master_api_fails_only_the_results_that_do_not_travel(tmp_path: Path) -> None:
    """CPython ExecutorDeadlockTest's result cases (loky's crash_cases too) for a ``@mwpy.master`` under ``mwpy local``.

    A result that fails to pickle on the slave is that task's
    ``PicklingError``; one that fails to unpickle on the master is its
    ``ResultDecodeError``, even when unpickling calls ``sys.exit(7)``: before,
    that ended the master with status 7 and no word of why (under
    ``mwpy.Executor`` it broke the executor). The other results come.
    """
    program = tmp_path / "results.py"
    program.write_text(textwrap.dedent(MASTER_PROGRAM))
    done = run_local(program, "pickle", "unpickle", "exit", "fine", timeout=RESULT_TIMEOUT * 2)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:4] == [
        "exit -> ResultDecodeError: the master cannot unpickle the result: SystemExit(7)",
        "fine -> fine",
        "pickle -> PicklingError: no pickling this",
        "unpickle -> ResultDecodeError: the master cannot unpickle the result: UnpicklingError('no unpickling this')",
    ]


#: A client timeout short enough for a test, long enough for a loaded machine's heartbeats (every 3/4 s).
SHORT_CLIENT_TIMEOUT = ["--mw-client-timeout", "3"]
FROZEN = "silent for 3 s (client timeout), killed"


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended and been reaped (its back end reaps what it kills)."""
    return not Path(f"/proc/{pid}").exists()


def test_a_call_that_freezes_its_slave_fails_alone_and_leaving_returns(tmp_path: Path) -> None:
    """dask ``distributed/tests/test_failed_workers.py`` ``test_worker_ttl_restarts_worker`` (block_evloop=True).

    The call sleeps in C holding the GIL: its slave neither answers nor
    exits. dask's scheduler drops the silent worker, its nanny SIGKILLs it
    and the task's ``suspicious`` count grows, so with ``allowed_failures=0``
    it raises ``KilledWorker``. Before, the master dropped the slave, the
    local back end kept the stuck process, no replacement started, the call
    waited for ever and leaving the ``with`` block never returned. Now the
    back end kills each dropped slave, the drop counts as the call's death
    (one allowed here, so two slaves freeze), the future raises naming it,
    and the other calls finish.
    """
    with mwpy.Executor(max_workers=2, options=[*SHORT_CLIENT_TIMEOUT, "--mw-allowed-failures", "1"]) as ex:
        before = ex.submit(work.mul, 6, 7)
        frozen = ex.submit(crash.freeze, str(tmp_path))
        after = ex.submit(work.mul, 7, 8)
        error = killed(frozen)
        assert error.function == "freeze"
        alone = [death for death in error.deaths if "other tasks too" not in death]
        assert len(alone) == 2, error.deaths
        assert all(death.endswith(FROZEN) for death in alone), error.deaths
        assert str(error).startswith("freeze killed 2 slaves that ran it (allowed failures: 1)")
        assert (before.result(timeout=RESULT_TIMEOUT), after.result(timeout=RESULT_TIMEOUT)) == (42, 56)
        squares_still_come(ex)
        pids = [int(started.name.removeprefix("started-")) for started in tmp_path.glob("started-*")]
        assert len(pids) == len(error.deaths)  # one slave per run, each frozen
        wait_until(lambda: all(map(gone, pids)), RESULT_TIMEOUT, f"the frozen slaves {pids} to be killed")


FREEZING_PROGRAM = """\
    import ctypes
    import sys

    import mwpy


    @mwpy.task
    def freeze():
        ctypes.PyDLL(None).sleep(1000)  # holds the GIL: no heartbeat, no exit


    @mwpy.task
    def double(x):
        return 2 * x


    @mwpy.master
    def main(mw, argv):
        freeze.submit()
        for x in range(10):
            double.submit(x)
        results = []
        while len(results) < 11:
            mw.loop()
            results += mw.results()
        for result in results:
            if not result.ok:
                print("failed:", result.error.type, result.error.message)
        print("doubled:", sorted(r.value for r in results if r.ok))
        return 0


    if __name__ == "__main__":
        mwpy.run()
"""


def test_a_task_that_freezes_its_slave_fails_under_mwpy_local(tmp_path: Path) -> None:
    """The same freeze (dask's test_worker_ttl_restarts_worker) for a ``@mwpy.master`` under ``mwpy local``.

    There the local back end lives in ``mwpy local``'s process and the master
    in the program's: the master names the slave it dropped in the work folder
    and the back end kills it. With no death allowed, the first freeze fails
    the task; the other tasks' results come and the computation ends.
    """
    program = tmp_path / "freezing.py"
    program.write_text(textwrap.dedent(FREEZING_PROGRAM))
    done = run_local(program, *SHORT_CLIENT_TIMEOUT, *ONE_DEATH, timeout=RESULT_TIMEOUT * 2)
    assert done.returncode == 0, done.stderr
    assert "failed: KilledSlaveError freeze killed 1 slaves that ran it (allowed failures: 0)" in done.stdout
    assert FROZEN in done.stdout
    assert f"doubled: {[2 * x for x in range(10)]}" in done.stdout


DYING_SCRIPT = """\
    import ctypes
    import faulthandler

    import mwpy


    def crash():
        faulthandler.disable()
        ctypes.string_at(0)  # SIGSEGV


    def square(x):
        return x * x


    if __name__ == "__main__":
        with mwpy.Executor(max_workers=2, options=["--mw-allowed-failures", "1"]) as ex:
            doomed = ex.submit(crash)
            print([ex.submit(square, x).result(timeout=300) for x in range(4)])
            try:
                doomed.result(timeout=300)
            except mwpy.KilledSlaveError as exc:
                print("deaths:", len(exc.deaths))
"""
#: The one line a slave's death prints, on the ``mwpy.master`` logger at WARNING, when its tasks run again.
DEATH_LINE = re.compile(r"slave-\d+ disconnected \(EOF\); (1 task|\d+ tasks) in flight, queued again")


def test_each_death_prints_at_most_one_short_line_and_the_error_is_the_future_s(tmp_path: Path) -> None:
    """Issue 21 item 7: each death printed ``slave-N disconnected (EOF); 1 tasks in flight`` before the error.

    A ProcessPoolExecutor user gets the error on the future and nothing
    else; a dask user also sees a WARNING per worker restarted. mwpy's stderr
    (Python's default: warnings, on the last-resort handler) has at most one
    short line per death that sends its tasks to other slaves, saying so; the
    death that fails the call prints nothing (its future raises), and nothing
    else is printed: no traceback, no other line.
    """
    script = tmp_path / "dying.py"
    script.write_text(textwrap.dedent(DYING_SCRIPT))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=RESULT_TIMEOUT * 2, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "[0, 1, 4, 9]"
    deaths = int(done.stdout.splitlines()[1].removeprefix("deaths: "))
    lines = done.stderr.splitlines()
    assert all(DEATH_LINE.fullmatch(line) for line in lines), done.stderr
    assert 1 <= len(lines) < deaths  # each death but the last one, which fails the call, says its tasks run again
