"""The slave job has one description: submit/slaves.sub and the overseer's agree, command by command.

No pool is needed, only the htcondor2 bindings, which expand both
descriptions the way ``condor_submit`` and the schedd do. The overseer's
description is made from the resource file of a real master, started as
submit/master.sub starts it, so a change on either side that makes the two
kinds of slave job differ fails here. Also: what a user's ``--submit-file``
may and may not change.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import htcondor2
import pytest

from mwpy import resource_file
from mwpy.backends import Launch
from mwpy.backends.htcondor import RESERVED, command_key, merge_commands, slave_description
from mwpy.errors import ConfigurationError
from tests.support import EXAMPLES, ROOT, mwpy_command, start_master

#: Macros of slaves.sub (its settings, not submit commands).
MACROS = {"slaves", "program", "resource", "member_id", "slave_python", "slave_memory", "slave_options"}
#: The overseer sets initialdir (the resource file's folder); condor_submit takes the folder it runs in.
OVERSEER_ONLY = {"initialdir"}


def condor_arguments(text: str) -> list[str]:
    """Condor's new-style ``arguments`` (double-quoted, '...' groups) as a list; no argument here holds a quote."""
    assert text[0] + text[-1] == '""', text
    return shlex.split(text[1:-1])


def expanded(submit: htcondor2.Submit) -> dict[str, str]:
    """Every submit command with its macros expanded, keyed as Condor compares commands."""
    return {command_key(key): submit.expand(key) for key in submit if command_key(key) not in MACROS}


def normalised(commands: dict[str, str]) -> dict[str, object]:
    """Values compared by meaning where two spellings mean the same: argument lists, sets of files."""
    result: dict[str, object] = dict(commands)
    result["arguments"] = condor_arguments(commands["arguments"])
    result["transfer_input_files"] = {item.strip() for item in commands["transfer_input_files"].split(",")}
    return result


@pytest.fixture
def master_launch(tmp_path: Path) -> Launch:
    """What the overseer would launch for monte_carlo_pi.py started as submit/master.sub starts it."""
    program = tmp_path / "monte_carlo_pi.py"
    shutil.copy(EXAMPLES / "monte_carlo_pi.py", program)
    rf = tmp_path / "resource.json"
    computation = start_master(
        program,
        tmp_path,
        "--mw-member-id",
        f"mwpy:{rf}",
        "--mw-slave-bundle",
        "--mw-slave-executable",
        "/usr/bin/python3",
    )
    try:
        return Launch.of(resource_file.read(rf), str(rf))
    finally:
        computation.stop()


def test_slaves_sub_and_the_overseer_describe_the_same_slave_job(master_launch: Launch) -> None:
    folder = Path(master_launch.resource_file).parent
    static = htcondor2.Submit((ROOT / "submit" / "slaves.sub").read_text(encoding="utf-8"))
    static["program"] = str(folder / "monte_carlo_pi.py")  # what condor_submit makes of the macros in `folder`
    static["resource"] = master_launch.resource_file
    overseer = htcondor2.Submit(slave_description(master_launch))

    theirs, ours = expanded(static), expanded(overseer)
    assert (set(ours) - OVERSEER_ONLY) ^ set(theirs) == set(), "commands only one of the two sets"
    assert ours["initialdir"] == str(folder)
    del ours["initialdir"]
    mismatched = {
        key: (value, normalised(ours)[key])
        for key, value in normalised(theirs).items()
        if normalised(ours)[key] != value
    }
    assert mismatched == {}, "slaves.sub value vs the overseer's"


@pytest.mark.parametrize(
    "command",
    ["executable", "Arguments", "transfer_input_files", "on_exit_remove", "+MwpyMemberId", "MY.MwpyRole", "initialdir"],
)
def test_a_submit_file_may_not_set_what_the_overseer_relies_on(tmp_path: Path, command: str) -> None:
    extra = tmp_path / "extra.sub"
    extra.write_text(f"request_memory = 2048\n{command} = 1\nqueue\n", encoding="utf-8")
    rf = tmp_path / "resource.json"
    done = subprocess.run(
        mwpy_command("overseer", str(rf), "--backend", "condor", "--submit-file", str(extra)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"mwpy overseer: error: --submit-file {extra}: {command} is set by mwpy for every slave job "
        "and cannot be overridden\n"
    )
    assert command_key(command) in RESERVED


def test_a_submit_file_that_is_not_commands_is_one_line_and_exit_2(tmp_path: Path) -> None:
    extra = tmp_path / "extra.sub"
    extra.write_text("# memory\nrequest_memory 2048\n", encoding="utf-8")
    done = subprocess.run(
        mwpy_command("overseer", str(tmp_path / "rf.json"), "--submit-file", str(extra)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (2, f"mwpy overseer: error: {extra}:2: expected 'command = value'\n")


def test_user_commands_replace_mwpy_s_in_any_spelling_and_requirements_add_up(master_launch: Launch) -> None:
    description = slave_description(
        master_launch, {"Request_Memory": "4096", "requirements": "HasDocker", "+Project": '"physics"'}
    )
    assert [key for key in description if command_key(key) == "request_memory"] == ["Request_Memory"]
    assert description["Request_Memory"] == "4096"
    assert description["requirements"] == "HasDocker"  # mwpy itself requires nothing of a slot
    assert description["+Project"] == '"physics"'
    merged = merge_commands({"requirements": '(OpSys == "LINUX")'}, {"Requirements": "HasDocker"})
    assert merged == {"requirements": '((OpSys == "LINUX")) && (HasDocker)'}
    with pytest.raises(ConfigurationError, match=r"MY\.MwpyRole is set by mwpy"):
        slave_description(master_launch, {"MY.MwpyRole": '"master"'})


def test_the_overseer_s_description_is_valid_submit_language(master_launch: Launch) -> None:
    submit = htcondor2.Submit(slave_description(master_launch, {"requirements": "HasDocker"}))
    assert condor_arguments(submit.expand("arguments"))[1:] == [
        "monte_carlo_pi.py",
        "--mw-slave",
        "--mw-resource-file",
        "resource.json",
    ]
