"""``mwpy jobs SUBMITFILE``: the jobs of a plain HTCondor submit description, run as mwpy tasks.

Seed 000's Master-Agents system on mwpy: the master reads the submit file
(:mod:`mwpy.jobs.description`, HTCondor's own parser), sends one task per job
(:mod:`mwpy.jobs.program`), and reused slaves run each job in a fresh scratch
folder (:mod:`mwpy.jobs.runner`), fetching inputs by content hash from the
master's file service (:mod:`mwpy.data.server`) and caching them for the life
of the slave. :mod:`mwpy.jobs.command` is the ``mwpy jobs`` command.
"""
