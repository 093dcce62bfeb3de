"""The resource-file reader and writer in this process (docs/mutation.md).

tests/test_hostile_files.py reads hostile files in child processes (so that a
regression hangs a child, not the test run); mutation testing cannot see into
those. These tests read the same kinds of file here, and pin the one-line
messages a user gets to fix a file: which file, which key, what was wrong.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from mwpy import resource_file
from mwpy.errors import InvalidResourceFileError, ResourceFileError
from mwpy.resource_file import ResourceFile
from tests.test_hostile_files import HOSTILE, resource_fields

#: Cases that are safe to read in the test process (no device, FIFO or huge file).
IN_PROCESS = [name for name in HOSTILE if name not in {"a symlink to /dev/zero", "a FIFO", "a huge regular file"}]


def problem_of(text: str, source: str = "f.json") -> str:
    """The message ``loads`` raises for ``text``, less the ``SOURCE: `` prefix it must start with."""
    with pytest.raises(InvalidResourceFileError) as raised:
        resource_file.loads(text, source)
    message = str(raised.value)
    assert message.startswith(f"{source}: "), message
    return message.removeprefix(f"{source}: ")


def fields_problem(**changes: Any) -> str:
    return problem_of(json.dumps(resource_fields(**changes)))


@pytest.mark.parametrize("name", IN_PROCESS)
def test_read_in_process_names_the_file_and_the_problem_on_one_line(name: str, tmp_path: Path) -> None:
    make, problem = HOSTILE[name]
    path = tmp_path / "resource.json"
    make(path)
    with pytest.raises(InvalidResourceFileError) as raised:
        resource_file.read(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ")
    assert problem in message
    assert "\n" not in message


def test_exact_messages_for_values_the_parser_refuses() -> None:
    record = resource_fields(timestamp=12345.5)
    text = json.dumps(record)
    assert problem_of(text.replace("12345.5", "NaN")).startswith("not JSON (NaN is not a JSON number")
    assert problem_of(text.replace("12345.5", "1e999")).startswith("not JSON (1e999 is out of range")
    assert problem_of('{"a": 1, "a": 2}').startswith("not JSON (duplicate key 'a'")
    assert problem_of("{").startswith("not JSON (")
    assert problem_of("[1, 2]") == "not a JSON object"


def test_nesting_is_measured_by_depth_not_by_bracket_count() -> None:
    depth = resource_file.MAX_DEPTH
    assert problem_of("[" * depth + "]" * depth) == "not a JSON object"  # exactly the limit: parsed
    too_deep = f"not JSON (nested deeper than {depth} levels)"
    assert problem_of("[" * (depth + 1) + "]" * (depth + 1)) == too_deep
    assert problem_of("[" * 100_000 + "]" * 100_000) == too_deep
    # Many closed siblings keep the depth at 2; a deep one after them still counts from where they left it.
    assert problem_of("[" + "[]," * 100 + "[]]") == "not a JSON object"
    assert problem_of("[" + "[]," * 5 + "[" * depth + "]" * depth + "]") == too_deep
    # Brackets inside strings are text, not nesting.
    assert problem_of(json.dumps(["[" * 100, "{" * 100])) == "not a JSON object"


def test_wrong_types_name_the_key_and_what_was_expected() -> None:
    assert fields_problem(master_port="123") == "expected int, got str @ $.master_port"
    assert fields_problem(member_id=5) == "expected str, got int @ $.member_id"
    assert fields_problem(timestamp=True) == "expected float or int, got bool @ $.timestamp"
    assert fields_problem(timestamp="now") == "expected float or int, got str @ $.timestamp"
    assert fields_problem(slave_files="x") == "expected a list of strings, got str @ $.slave_files"
    assert fields_problem(slave_files=["a", 1, 2.5]) == (
        "expected a list of strings, it holds a value of type int @ $.slave_files"
    )
    assert fields_problem(slaves_connected=[1]) == "expected an object of integers, got list @ $.slaves_connected"
    assert fields_problem(slaves_connected={"a": 1, "b": True, "c": "x"}) == (
        "expected an object of integers, it holds a value of type bool @ $.slaves_connected"
    )
    assert fields_problem(master_port=0) == "'master_port' must be >= 1: 0 @ $"


def test_every_wrong_key_is_named_in_the_one_line() -> None:
    assert fields_problem(master_port="x", member_id=5) == (
        "expected str, got int @ $.member_id; expected int, got str @ $.master_port"
    )


def test_a_missing_key_is_named() -> None:
    fields = resource_fields()
    del fields["master_port"]
    assert problem_of(json.dumps(fields)) == "required key missing @ $.master_port"


def test_hex_keys_accept_hex_only_and_the_fingerprint_only_at_its_length() -> None:
    for secret in ("zz", "", "é1", "abc"):
        assert fields_problem(secret=secret) == "secret must be hex digits @ $", secret
    assert fields_problem(tls_fingerprint="ab") == "tls_fingerprint must be 64 hex digits @ $"
    assert fields_problem(tls_fingerprint="xy" * 32) == "tls_fingerprint must be 64 hex digits @ $"
    record = resource_file.loads(json.dumps(resource_fields(secret="ab" * 5, tls_fingerprint="0F" * 32)))
    assert (record.secret, record.tls_fingerprint) == ("ab" * 5, "0F" * 32)
    no_secret = resource_file.loads(json.dumps(resource_fields(secret=None, tls_fingerprint=None)))
    assert (no_secret.secret, no_secret.tls_fingerprint) == (None, None)


def test_format_and_version_are_checked_first_and_exactly() -> None:
    assert fields_problem(format="other") == "not an mwpy resource file (format is 'other')"
    fields = resource_fields()
    del fields["format"]
    assert problem_of(json.dumps(fields)) == "not an mwpy resource file (format is None)"
    assert fields_problem(version=2) == "resource file version 2, this mwpy reads version 1"
    # JSON true and 1.0 compare equal to 1 in Python; they are still not version 1.
    assert fields_problem(version=True) == "resource file version True, this mwpy reads version 1"
    assert fields_problem(version=1.0) == "resource file version 1.0, this mwpy reads version 1"


def test_loads_without_a_source_calls_it_the_resource_file() -> None:
    with pytest.raises(InvalidResourceFileError, match=r"^resource file: not a JSON object$"):
        resource_file.loads("[]")


def test_long_problems_are_cut_and_line_breaks_escaped() -> None:
    limit = resource_file.MAX_MESSAGE
    prefix = "not an mwpy resource file (format is '"
    exact = "a" * (limit - len(prefix) - 2)  # the problem text is exactly the limit: kept whole
    assert fields_problem(format=exact) == f"{prefix}{exact}')"
    long = fields_problem(format="a" * 5000)
    assert long == (prefix + "a" * 5000)[:limit] + "..."
    with pytest.raises(InvalidResourceFileError) as raised:
        resource_file.loads("[]", "two\nlines\r.json")
    assert str(raised.value) == "two\\nlines\\r.json: not a JSON object"
    with pytest.raises(InvalidResourceFileError) as raised:
        resource_file.loads(json.dumps(resource_fields(format="x\ny")), "f.json")
    assert str(raised.value) == "f.json: not an mwpy resource file (format is 'x\\ny')"


def test_read_tells_missing_and_unreadable_files_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "new\nline.json"
    with pytest.raises(ResourceFileError) as raised:
        resource_file.read(missing)
    assert not isinstance(raised.value, InvalidResourceFileError)  # the master may yet write it
    assert str(raised.value) == f"{tmp_path}/new\\nline.json: no such resource file"

    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(InvalidResourceFileError) as invalid:
        resource_file.read(folder)
    assert str(invalid.value).startswith(f"{folder}: cannot read the resource file: ")

    # A transient error (EIO, say) is neither "missing" nor permanent: waiting may fix it.
    real_open = os.open

    def failing_open(path: Any, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == str(tmp_path / "flaky.json"):
            raise OSError(5, "Input/output error")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    with pytest.raises(ResourceFileError) as flaky:
        resource_file.read(tmp_path / "flaky.json")
    assert not isinstance(flaky.value, InvalidResourceFileError)
    assert str(flaky.value).startswith(f"{tmp_path / 'flaky.json'}: cannot read the resource file: ")


def test_read_refuses_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"member_id": "caf\xe9"}')
    with pytest.raises(InvalidResourceFileError) as raised:
        resource_file.read(path)
    assert str(raised.value) == (
        f"{path}: cannot read the resource file: not UTF-8 (invalid continuation byte at byte 18)"
    )


def test_read_names_the_file_in_content_problems(tmp_path: Path) -> None:
    path = tmp_path / "resource.json"
    path.write_text(json.dumps(resource_fields(version=9)))
    with pytest.raises(InvalidResourceFileError, match=r"version 9") as raised:
        resource_file.read(path)
    assert str(raised.value).startswith(f"{path}: resource file version 9")


def test_written_file_is_sorted_indented_json_that_reads_back(tmp_path: Path) -> None:
    record = resource_file.loads(json.dumps(resource_fields(member_id="m", slave_files=["a", "b"])))
    path = tmp_path / "resource.json"
    resource_file.write(path, record)
    text = path.read_text()
    assert text.endswith("}\n")
    data = json.loads(text)
    assert list(data) == sorted(data)  # docs/resource-file.md: keys sorted
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert resource_file.read(path) == record


def test_write_renames_a_hidden_temporary_file_from_the_same_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same folder: the rename is atomic. ``.NAME.*``: .gitignore and users' globs rely on the name."""
    record = resource_file.loads(json.dumps(resource_fields()))
    renamed: list[tuple[str, str]] = []
    real_rename = os.rename

    def rename(src: Any, dst: Any, **dir_fds: Any) -> None:
        renamed.append((os.fspath(src), os.fspath(dst)))
        real_rename(src, dst, **dir_fds)

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.chdir(tmp_path.parent)
    target = tmp_path / "resource.json"
    resource_file.write(target, record)
    [(src, dst)] = renamed
    assert Path(src).parent == tmp_path
    assert Path(src).name.startswith(".resource.json.")
    assert Path(src).name.endswith(".tmp")
    assert Path(dst) == target
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resource.json"]


def test_a_failed_write_raises_its_own_error_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    record = resource_file.loads(json.dumps(resource_fields()))
    target = tmp_path / "resource.json"
    target.mkdir()  # a rename cannot put a file over a folder
    with pytest.raises(IsADirectoryError):
        resource_file.write(target, record)
    assert [p.name for p in tmp_path.iterdir()] == ["resource.json"]


def record_at(timestamp: float, update_interval: float) -> ResourceFile:
    return resource_file.loads(json.dumps(resource_fields(timestamp=timestamp, update_interval=update_interval)))


def test_age_and_staleness_use_the_given_clock() -> None:
    record = record_at(1000.0, 300.0)  # grace: half the interval, 150 s
    assert record.age(1000.0 + 42) == 42
    assert not record.stale(1000.0 + 449)
    assert not record.stale(1000.0 + 450)  # overdue only after interval + grace
    assert record.stale(1000.0 + 451)
    assert record.stale()  # 1000 s after the epoch is long ago
    short = record_at(1000.0, 4.0)  # grace: at least MIN_STALE_GRACE (10 s)
    assert not short.stale(1000.0 + 14)
    assert short.stale(1000.0 + 14.5)
    medium = record_at(1000.0, 100.0)  # grace 50 s: not stale at 120 s, nor at 60 s
    assert not medium.stale(1000.0 + 120)
    assert not medium.stale(1000.0 + 60)
    finished = resource_file.loads(json.dumps(resource_fields(timestamp=1000.0, computation_status="finished")))
    assert not finished.stale(10**9)


@pytest.mark.parametrize(("interval", "grace"), [(4.0, 10.0), (20.0, 10.0), (40.0, 20.0), (300.0, 150.0)])
def test_stale_and_abandoned_from_the_very_next_instant_past_their_edge(interval: float, grace: float) -> None:
    """resource-file.md: stale once now > timestamp + interval + max(10 s, interval / 2), abandoned once
    overdue by more than the limit. The clock is passed in, so the edge is checked to the last bit of a
    float: a bound moved by a few milliseconds either way fails here."""
    record = record_at(1000.0, interval)
    edge = 1000.0 + interval + grace
    just_after = math.nextafter(edge, math.inf)
    assert record.overdue(edge) == 0
    assert not record.stale(edge)
    assert record.stale(just_after)
    assert not record.stale(math.nextafter(edge, -math.inf))
    limit = 3600.0
    assert not record.abandoned(limit, edge + limit)
    assert record.abandoned(limit, math.nextafter(edge + limit, math.inf))
    assert not record.abandoned(0.0, edge)
    assert record.abandoned(0.0, just_after)  # a limit of 0: abandoned as soon as stale
