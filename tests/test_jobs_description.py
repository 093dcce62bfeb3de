"""Reading submit files with HTCondor's parser: every queue form, macros, both syntaxes, what is refused.

These read real files with the real ``htcondor2.Submit``; the last tests run
``mwpy jobs`` itself to show that a bad file stops before anything runs.
"""

from __future__ import annotations

import collections
import subprocess
from pathlib import Path

import pytest

from mwpy.errors import SubmitError
from mwpy.jobs.arguments import parse_arguments, parse_environment
from mwpy.jobs.description import SubmitDescription
from tests.support import mwpy_command


def _describe(tmp_path: Path, text: str, cluster: int = 1) -> SubmitDescription:
    path = tmp_path / "jobs.sub"
    path.write_text(text)
    return SubmitDescription(path, base=str(tmp_path), cluster=cluster)


def test_queue_n_numbers_the_jobs_and_expands_process_and_cluster(tmp_path: Path) -> None:
    text = "executable = /bin/echo\narguments = $(Cluster).$(Process)\noutput = out.$(Process)\nqueue 3\n"
    jobs = list(_describe(tmp_path, text, cluster=42).jobs())
    assert [job.job_id for job in jobs] == ["42.0", "42.1", "42.2"]
    assert [job.arguments for job in jobs] == [("42.0",), ("42.1",), ("42.2",)]
    assert jobs[2].stdout == str(tmp_path / "out.2")


def test_a_bare_queue_is_one_job(tmp_path: Path) -> None:
    assert [job.job_id for job in _describe(tmp_path, "executable = /bin/true\nqueue\n").jobs()] == ["1.0"]


def test_queue_in_a_list_gives_item_and_a_count_repeats_each_item(tmp_path: Path) -> None:
    text = "executable = /bin/echo\narguments = $(Item) $(Step) $(Process)\nqueue 2 in (red, green)\n"
    jobs = list(_describe(tmp_path, text).jobs())
    assert [job.arguments for job in jobs] == [
        ("red", "0", "0"),
        ("red", "1", "1"),
        ("green", "0", "2"),
        ("green", "1", "3"),
    ]


def test_queue_variables_from_a_file_and_from_an_inline_list(tmp_path: Path) -> None:
    (tmp_path / "rows.txt").write_text("alpha 1\nbeta 2\n")
    text = "executable = /bin/echo\narguments = $(name)-$(n)\nqueue name, n from rows.txt\n"
    assert [job.arguments for job in _describe(tmp_path, text).jobs()] == [("alpha-1",), ("beta-2",)]
    inline = "executable = /bin/echo\narguments = $(x)\nqueue x from (\n  one\n  two\n)\n"
    assert [job.arguments for job in _describe(tmp_path, inline).jobs()] == [("one",), ("two",)]


def test_queue_matching_files_and_folders(tmp_path: Path) -> None:
    for name in ("b.dat", "a.dat", "c.txt"):
        (tmp_path / name).write_text(name)
    (tmp_path / "d1.dat").mkdir()
    text = "executable = /bin/cat\ninput = $(file)\nqueue file matching files *.dat\n"
    assert [job.stdin for job in _describe(tmp_path, text).jobs()] == [str(tmp_path / "a.dat"), str(tmp_path / "b.dat")]
    folders = "executable = /bin/ls\narguments = $(d)\nqueue d matching dirs *.dat\n"
    assert [job.arguments for job in _describe(tmp_path, folders).jobs()] == [("d1.dat/",)]


def test_user_macros_and_initialdir_are_expanded_per_job(tmp_path: Path) -> None:
    text = (
        "executable = run.sh\nrun = r$(Process)\ninitialdir = work/$(run)\n"
        "output = $(run).out\ntransfer_input_files = common.db, data/$(run)/, folder\nqueue 2\n"
    )
    jobs = list(_describe(tmp_path, text).jobs())
    assert jobs[1].initialdir == str(tmp_path / "work" / "r1")
    assert jobs[1].executable == str(tmp_path / "run.sh")  # relative to the submit folder, not initialdir
    assert jobs[1].stdout == str(tmp_path / "work" / "r1" / "r1.out")
    assert [(Path(i.source).relative_to(tmp_path / "work" / "r1").as_posix(), i.name) for i in jobs[1].inputs] == [
        ("common.db", "common.db"),
        ("data/r1", ""),  # a trailing slash: the folder's contents
        ("folder", "folder"),
    ]


def test_arguments_in_both_syntaxes() -> None:
    assert parse_arguments("a b  c") == ("a", "b", "c")
    assert parse_arguments('one \\"two\\"') == ("one", '"two"')
    assert parse_arguments("\"a 'b c' 'it''s' \"\"q\"\"\"") == ("a", "b c", "it's", '"q"')
    assert parse_arguments('""') == ()
    with pytest.raises(SubmitError, match="unbalanced"):
        parse_arguments('"\'open"')


def test_environment_in_both_syntaxes() -> None:
    assert parse_environment("A=1;B=two words") == (("A", "1"), ("B", "two words"))
    assert parse_environment("\"A=1 B='x y' C=\"") == (("A", "1"), ("B", "x y"), ("C", ""))
    with pytest.raises(SubmitError, match="NAME=VALUE"):
        parse_environment('"justaword"')


def test_transfer_settings(tmp_path: Path) -> None:
    text = (
        "executable = /bin/true\ntransfer_executable = false\nshould_transfer_files = ALWAYS\n"
        "when_to_transfer_output = ON_SUCCESS\ntransfer_output_files = a, dir/b\nqueue\n"
    )
    (job,) = _describe(tmp_path, text).jobs()
    assert (job.transfer_executable, job.transfer, job.outputs_on_success_only) == (False, True, True)
    assert job.executable == "/bin/true"
    assert job.transfer_outputs == ("a", "dir/b")
    (plain,) = _describe(tmp_path, "executable = /bin/true\nqueue\n").jobs()
    assert (plain.transfer, plain.if_needed, plain.transfer_outputs) == (True, True, None)
    (shared,) = _describe(tmp_path, "executable = /bin/true\nshould_transfer_files = FALSE\nqueue\n").jobs()
    assert not shared.transfer
    with pytest.raises(SubmitError, match="when_to_transfer_output = ON_EXIT: expected NONE with"):
        _describe(
            tmp_path, "executable = /bin/true\nshould_transfer_files = NO\nwhen_to_transfer_output = ON_EXIT\nqueue\n"
        )


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("universe = docker", "universe = docker"),
        ("docker_image = debian", "docker_image"),
        ("accounting_group = physics", "accounting_group"),
        ("checkpoint_exit_code = 85", "checkpoint_exit_code"),
        ("notification = complete", "notification = complete"),
        ("stream_output = true", "stream_output = true"),
        ("log_xml = true", "log_xml = true"),
        ("transfer_input_files = https://example.org/x", "transfer_input_files"),
        ("max_transfer_input_mb = 10", "max_transfer_input_mb"),
        ("MaxTransferInputMB = 10", "MaxTransferInputMB"),  # a command under its job-attribute name
    ],
)
def test_a_command_mwpy_cannot_honour_is_refused_by_name(tmp_path: Path, line: str, named: str) -> None:
    with pytest.raises(SubmitError, match=named):
        _describe(tmp_path, f"executable = /bin/true\n{line}\nqueue\n")


@pytest.mark.parametrize(
    "line",
    [
        "requirements = Memory > 100",
        "on_exit_remove = ExitCode == 0",
        'transfer_output_remaps = "a=b"',
        "getenv = true",
        "PeriodicRelease = NumJobStarts < 3",
        "max_materialize = 10",
        "max_idle = 10",
        "request_gpus = 1",
    ],
)
def test_commands_mwpy_honours_are_accepted(tmp_path: Path, line: str) -> None:
    _describe(tmp_path, f"executable = /bin/true\n{line}\nqueue\n")


@pytest.mark.parametrize(
    ("getenv", "copied"),
    [  # the condor_submit man page's examples, and what condor_submit -dry-run copies (HTCondor 23.9, the test pool)
        ("!PATH, !INCLUDE", ["CUDA_HOME", "HOME", "Pfoo", "QUUX", "path_lower"]),
        ("*cuda*", ["CUDA_HOME"]),
        ("!path, P*, Q*", ["Pfoo", "QUUX", "path_lower"]),
        ("CUDA_HOME; quux", ["CUDA_HOME", "QUUX"]),
        ("true", ["CUDA_HOME", "HOME", "PATH", "Pfoo", "QUUX", "path_lower"]),
    ],
)
def test_getenv_takes_condor_submit_s_match_lists(tmp_path: Path, getenv: str, copied: list[str]) -> None:
    """Members are separated by commas, semicolons or spaces, match without regard to case, and ``!`` keeps a
    variable out (condor_submit man page, ``getenv``)."""
    environment = {"CUDA_HOME": "/opt/cuda", "HOME": "/h", "PATH": "/usr/bin", "Pfoo": "pf", "QUUX": "q"}
    path = tmp_path / "jobs.sub"
    path.write_text(f"executable = /bin/env\ngetenv = {getenv}\nqueue\n")
    description = SubmitDescription(path, base=str(tmp_path), environment={**environment, "path_lower": "x"})
    (job,) = description.jobs()
    assert sorted(name for name, _ in job.environment) == copied


def test_a_line_no_job_uses_gets_condor_submit_s_warning(tmp_path: Path) -> None:
    description = _describe(
        tmp_path,
        "executable = /bin/echo\nargumnets = hello\nmyvar = 3\nused = x\narguments = $(used)\nqueue 2\nlate = 1\n",
    )
    assert description.warnings() == [
        "the line 'argumnets = hello' was unused by mwpy jobs. Is it a typo?",
        "the line 'myvar = 3' was unused by mwpy jobs. Is it a typo?",
        "line 7: 'late = 1' comes after the last queue statement: no job uses it",
    ]


def test_several_queue_statements_make_one_cluster_with_the_commands_each_one_sees(tmp_path: Path) -> None:
    text = (
        "executable = /bin/echo\narguments = first\nqueue 2\n"
        "arguments = second $(Process)\nqueue input in (a, b)\narguments = late\n"
    )
    jobs = list(_describe(tmp_path, text).jobs())
    assert [(job.job_id, job.arguments, job.stdin) for job in jobs] == [
        ("1.0", ("first",), None),
        ("1.1", ("first",), None),
        ("1.2", ("second", "2"), str(tmp_path / "a")),
        ("1.3", ("second", "3"), str(tmp_path / "b")),
    ]


def test_queue_variables_may_have_the_names_of_commands(tmp_path: Path) -> None:
    """The manual's forms: a variable named input, arguments or initialdir sets that command for its job."""
    for folder in ("d1", "d2"):
        (tmp_path / folder).mkdir()
    text = "executable = /bin/cat\nqueue 1 input in A, B, C\n"
    assert [job.stdin for job in _describe(tmp_path, text).jobs()] == [str(tmp_path / x) for x in "ABC"]
    text = "executable = /bin/echo\nqueue input, arguments from (\n  file1, -a -b 26\n  file2, -c -d 92\n)\n"
    assert [(job.stdin, job.arguments) for job in _describe(tmp_path, text).jobs()] == [
        (str(tmp_path / "file1"), ("-a", "-b", "26")),
        (str(tmp_path / "file2"), ("-c", "-d", "92")),
    ]
    text = "executable = /bin/pwd\nqueue initialdir matching dirs d*\n"
    assert [job.initialdir for job in _describe(tmp_path, text).jobs()] == [str(tmp_path / "d1"), str(tmp_path / "d2")]


def test_a_queue_count_is_an_expression(tmp_path: Path) -> None:
    text = "executable = /bin/echo\nN = 3\nqueue $(N)+1 X in (a, b)\n"
    description = _describe(tmp_path, text)
    assert description.total == 8
    assert [job.job_id for job in description.jobs()][-1] == "1.7"
    with pytest.raises(SubmitError, match="line 2: queue two: Invalid Queue count expression"):
        _describe(tmp_path, "executable = /bin/echo\nqueue two\n")


def test_a_syntax_error_names_its_line(tmp_path: Path) -> None:
    with pytest.raises(SubmitError, match=r"jobs.sub, line 2: 'foo bar' is not a submit command"):
        _describe(tmp_path, "executable = /bin/echo\nfoo bar\nqueue\n")


def test_an_include_that_cannot_run_names_its_line(tmp_path: Path) -> None:
    """The manual's ``include : list-infiles.sh |``: condor_submit looks for the command on PATH (and fails on
    line 6, "not a valid command"); the bindings say only "parse_up_to_q_line() failed"."""
    script = tmp_path / "list-infiles.sh"
    script.write_text('#!/bin/sh\necho "transfer_input_files = a.dat"\n')
    script.chmod(0o755)
    (tmp_path / "a.dat").write_text("a")
    text = "executable = /bin/cat\narguments = a.dat\ninclude : {} |\nqueue\n"
    with pytest.raises(SubmitError, match=r"jobs.sub, line 3: 'include : list-infiles.sh \|': no such command: list"):
        _describe(tmp_path, text.format("list-infiles.sh"))
    with pytest.raises(SubmitError, match=r"jobs.sub, line 2: 'include : other.sub': no such file: other.sub$"):
        _describe(tmp_path, "executable = /bin/cat\ninclude : other.sub\nqueue\n")
    (job,) = _describe(tmp_path, text.format("./list-infiles.sh")).jobs()
    assert [item.name for item in job.inputs] == ["a.dat"]


def test_commands_are_refused_as_htcondor_reads_them_included_or_in_a_branch_taken(tmp_path: Path) -> None:
    (tmp_path / "accounting.sub").write_text("accounting_group = group_physics\n")
    with pytest.raises(SubmitError, match=r"^accounting_group: not supported by mwpy jobs"):
        _describe(tmp_path, "executable = /bin/true\ninclude : accounting.sub\nqueue\n")
    untaken = "executable = /bin/true\nif defined GROUP\n  accounting_group = $(GROUP)\nendif\nqueue\n"
    assert [job.job_id for job in _describe(tmp_path, untaken).jobs()] == ["1.0"]


@pytest.mark.parametrize("queue", ["queue 0", "queue x from empty.txt", "queue 3 x from empty.txt", "queue x in ()"])
def test_an_empty_queue_statement_queues_no_job_as_condor_submit_says(tmp_path: Path, queue: str) -> None:
    """condor_submit -dry-run (HTCondor 23.9, the test pool): exit 0, "... no jobs queued"."""
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "jobs.sub").write_text(f"executable = /bin/sh\narguments = \"-c 'touch ran'\"\n{queue}\n")
    assert list(_describe(tmp_path, (tmp_path / "jobs.sub").read_text()).jobs()) == []
    done = subprocess.run(mwpy_command("jobs", "jobs.sub"), cwd=tmp_path, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (
        0,
        'mwpy jobs: warning: "jobs.sub" has only empty "queue" commands -- no jobs queued\n',
    )
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    ("line", "attribute"),
    [  # '#' is a comment at the start of a line only: condor_submit stops with "Parse error in expression"
        ("requirements = (HasCHTCStaging == True)          # only if the job needs /staging", "Requirements"),
        ("on_exit_remove = ExitCode == 0   # done", "OnExitRemove"),
        ("request_memory = 1GB  # enough", "RequestMemory"),
    ],
)
def test_an_expression_that_does_not_parse_is_refused_before_any_job(tmp_path: Path, line: str, attribute: str) -> None:
    with pytest.raises(SubmitError, match=rf"^{attribute} = .* \(job 1.0\): not a ClassAd expression \(a '#' starts"):
        _describe(tmp_path, f"executable = /bin/true\n{line}\nqueue\n")


@pytest.mark.parametrize(
    ("line", "outputs"), [("", None), ("transfer_output_files =", None), ('transfer_output_files = ""', ())]
)
def test_transfer_output_files_empty_or_a_pair_of_quotes_as_condor_submit_reads_it(
    tmp_path: Path, line: str, outputs: tuple[str, ...] | None
) -> None:
    """The manual: 'Setting transfer_output_files to the empty string ("") means no files are to be transferred';
    condor_submit -dry-run (HTCondor 23.9) writes TransferOutput = "" for it, and nothing for an empty value."""
    (job,) = _describe(tmp_path, f"executable = /bin/true\nshould_transfer_files = YES\n{line}\nqueue\n").jobs()
    assert job.transfer_outputs == outputs


def test_a_hundred_thousand_jobs_are_generated_one_at_a_time(tmp_path: Path) -> None:
    description = _describe(tmp_path, "executable = /bin/true\narguments = $(Process)\nqueue 100000\n")
    assert description.total == 100_000
    jobs = description.jobs()
    assert next(jobs).arguments == ("0",)
    (last,) = collections.deque(jobs, maxlen=1)  # records are made when asked for, and forgotten
    assert last.arguments == ("99999",)


def test_mwpy_jobs_refuses_a_missing_input_file_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "present.txt").write_text("x")
    (tmp_path / "jobs.sub").write_text(
        f"executable = /bin/sh\narguments = \"-c 'touch {tmp_path}/ran.$(Process)'\"\n"
        "transfer_input_files = present.txt, missing.$(Process)\nqueue 3\n"
    )
    (tmp_path / "missing.0").write_text("only the first job's file exists")
    done = subprocess.run(
        mwpy_command("jobs", "jobs.sub", "--no-progress"), cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"mwpy jobs: error: job 1.1: input file {tmp_path}/missing.1 does not exist"
    ]
    assert not list(tmp_path.glob("ran.*")), "no job may run"


def test_mwpy_jobs_refuses_another_universe_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "jobs.sub").write_text("universe = grid\nexecutable = /bin/true\nqueue\n")
    done = subprocess.run(mwpy_command("jobs", "jobs.sub"), cwd=tmp_path, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (
        2,
        "mwpy jobs: error: universe = grid: mwpy jobs runs vanilla-universe jobs only\n",
    )


def test_an_undefined_macro_or_a_missing_initialdir_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SubmitError, match=r"job 1.0: no executable"):  # undefined macros expand to nothing
        _describe(tmp_path, "executable = $(exe)\nqueue\n")
    description = _describe(tmp_path, "executable = /bin/true\ninitialdir = run$(Process)\nqueue 2\n")
    (tmp_path / "run0").mkdir()
    with pytest.raises(SubmitError, match=f"job 1.1: initialdir {tmp_path}/run1 does not exist"):
        description.check_inputs()


def test_a_queue_count_that_is_undefined_is_refused_not_taken_for_a_number(tmp_path: Path) -> None:
    """classad2's Undefined is an IntEnum member (2): it must not queue two jobs."""
    with pytest.raises(SubmitError, match=r"line 3: queue \$\(N\): "):
        _describe(tmp_path, "executable = /bin/echo\nN = nothing_defined\nqueue $(N)\n")


def test_a_missing_executable_is_called_the_executable(tmp_path: Path) -> None:
    description = _describe(tmp_path, "executable = no_such_program\nqueue\n")
    with pytest.raises(SubmitError, match=f"^job 1.0: executable {tmp_path}/no_such_program does not exist$"):
        description.check_inputs()


def test_mwpy_jobs_names_the_line_of_a_syntax_error_and_stops_with_status_2(tmp_path: Path) -> None:
    (tmp_path / "jobs.sub").write_text("executable = /bin/true\nqueue 2\nthis is not a command\n")
    done = subprocess.run(mwpy_command("jobs", "jobs.sub"), cwd=tmp_path, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (
        2,
        "mwpy jobs: error: jobs.sub, line 3: 'this is not a command' is not a submit command (expected NAME = VALUE)\n",
    )
