"""The program behind ``mwpy jobs``, for submit files: jobs-master.sub and slaves.sub run it by path.

It is mwpy's own :mod:`mwpy.jobs.program` (the master that reads a submit
file, and the task that runs one job); slaves get mwpy from ``mwpy.pyz``.
"""

import mwpy
from mwpy.jobs import program  # noqa: F401 (declares the master algorithm and the task)

if __name__ == "__main__":
    mwpy.run()
