"""Every submit command of HTCondor 25.14 is honoured or refused by mwpy jobs, and docs/jobs.md's table says which.

tests/data/htcondor-25.14-submit-commands.txt lists the commands
condor_submit of the bindings' version knows (taken from HTCondor's own
source and manual, as its header says); none may be missing from
mwpy.jobs.commands, and none may be silently accepted: a refused one stops
``mwpy jobs`` before any job runs, with one line naming it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mwpy.errors import SubmitError
from mwpy.jobs import commands
from mwpy.jobs.description import SubmitDescription
from tests.support import ROOT, mwpy_command

KNOWN = [
    line.strip()
    for line in (ROOT / "tests" / "data" / "htcondor-25.14-submit-commands.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


def _concrete(name: str) -> str:
    """``request_<name>`` -> ``request_foo``: a family's member."""
    for placeholder in ("<name>", "<credential_service_name>", "<service-name>"):
        name = name.replace(placeholder, "foo")
    return name


def test_every_command_of_htcondor_25_14_is_known_as_honoured_or_refused() -> None:
    assert len(KNOWN) > 450
    unknown = [name for name in KNOWN if commands.lookup(_concrete(name)) is None]
    assert unknown == []


def test_docs_jobs_md_holds_the_table_of_every_command() -> None:
    text = (ROOT / "docs" / "jobs.md").read_text()
    assert commands.markdown_table() in text
    for command in commands.COMMANDS:
        assert f"`{command.name}`" in text
    rows = [line for line in commands.markdown_table().splitlines()[2:]]
    assert all(("| **honoured**:" in row) != ("| **refused**:" in row) for row in rows)  # no third kind


def test_a_macro_is_no_command_and_a_plus_attribute_is_a_job_attribute() -> None:
    assert commands.lookup("my_own_macro") is None
    attribute = commands.lookup("+ProjectName")
    assert attribute is not None
    assert attribute.honoured
    assert commands.lookup("PeriodicRelease") == commands.lookup("periodic_release")


REFUSED = sorted({c.name for c in commands.COMMANDS if not c.honoured and "<" not in c.name and c.name.islower()})


@pytest.mark.parametrize("name", REFUSED)
def test_a_refused_command_is_named_before_any_job_is_made(tmp_path: Path, name: str) -> None:
    path = tmp_path / "jobs.sub"
    path.write_text(f"executable = /bin/true\n{name} = 1\nqueue\n")
    with pytest.raises(SubmitError, match=f"^{name}: not supported by mwpy jobs: "):
        SubmitDescription(path, base=str(tmp_path))


def test_mwpy_jobs_stops_at_a_refused_command_with_one_line_and_status_2(tmp_path: Path) -> None:
    (tmp_path / "jobs.sub").write_text("executable = /bin/sh\narguments = \"-c 'touch ran'\"\nmanifest = true\nqueue\n")
    done = subprocess.run(mwpy_command("jobs", "jobs.sub"), cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("mwpy jobs: error: manifest: not supported by mwpy jobs: ")
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "ran").exists()
