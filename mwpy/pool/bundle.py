"""The slave bundle: mwpy and its pure-Python dependencies in one zipapp.

Execute nodes rarely have mwpy installed. ``python3 mwpy.pyz program.py
--mw-slave ...`` runs ``program.py`` exactly as ``python3 program.py`` would,
with mwpy, attrs, cattrs, cloudpickle (for functions sent by value) and htchirp
importable from the archive, so a slave needs
nothing on the node but a Python of a version mwpy supports. The master builds
it next to the resource file with ``--mw-slave-bundle``; ``mwpy bundle``
builds one by hand for a static submit file.
"""

from __future__ import annotations

import importlib.metadata
import os
import zipfile
from pathlib import Path

from mwpy import safe_files

#: Distributions a slave imports, besides mwpy itself (all pure Python).
DEPENDENCIES = ("attrs", "cattrs", "typing_extensions", "cloudpickle", "htchirp")

_MAIN = '''"""Run an mwpy program with the mwpy bundled in this archive importable."""
import os
import runpy
import sys

if len(sys.argv) < 2:
    sys.exit("usage: python3 mwpy.pyz PROGRAM.py [ARGS...]")
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def _files() -> list[tuple[Path, str]]:
    """(file on disk, name in the archive) for mwpy and its dependencies."""
    package = Path(__file__).parent.parent  # the mwpy package, without importing it from here
    files = [(path, f"mwpy/{path.relative_to(package).as_posix()}") for path in sorted(package.rglob("*.py"))]
    for name in DEPENDENCIES:
        dist = importlib.metadata.distribution(name)
        for entry in dist.files or ():
            if entry.suffix == ".py" and ".dist-info" not in str(entry) and "__pycache__" not in entry.parts:
                files.append((Path(str(dist.locate_file(entry))), entry.as_posix()))
    return files


def build(path: str | os.PathLike[str]) -> Path:
    """Write the bundle to ``path`` atomically and return its path."""
    target = Path(path)
    with safe_files.replacing(target, mode=0o644) as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("__main__.py", _MAIN)
        for source, name in _files():
            archive.write(source, name)
    return target
