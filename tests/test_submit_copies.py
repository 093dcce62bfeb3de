"""A user's copy of ``submit/`` works as it is: real files, equal to the package's ``mwpy/submit/``.

docs/condor.md tells users to ``cp -r submit examples $demo`` and submit from the copy; ``cp -r`` keeps
symbolic links as links, so links into ``mwpy/submit/`` would dangle there (``condor_submit``: "Failed to open
command file"). The package data is what an installed mwpy (``mwpy jobs --pool``) submits, so the two copies
must stay one text.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGED = ROOT / "mwpy" / "submit"


def test_cp_r_of_submit_gives_regular_files_equal_to_the_packaged_submit_files(tmp_path: Path) -> None:
    subprocess.run(["cp", "-r", str(ROOT / "submit"), str(tmp_path / "submit")], check=True)
    copied = sorted(path.name for path in (tmp_path / "submit").glob("*.sub"))
    assert copied == sorted(path.name for path in PACKAGED.glob("*.sub"))
    for name in copied:
        copy = tmp_path / "submit" / name
        assert not copy.is_symlink(), f"{name}: a link in a copy of submit/"
        assert copy.is_file(), f"{name}: not a regular file in a copy of submit/"
        assert copy.read_bytes() == (PACKAGED / name).read_bytes(), f"submit/{name} differs from mwpy/submit/{name}"
