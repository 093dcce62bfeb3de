"""Whether a connected slave can run a task's need: numbers compared, requirements evaluated as HTCondor would.

A need's cpus, memory, disk and gpus are compared with the slave's shape as
numbers. Its ``requirements`` are a ClassAd expression, evaluated with
HTCondor's own ClassAd library the way the negotiator matches a job to a slot
(:func:`mwpy.resources.meets`) against the slave's slot ad. So a slave serves
every task whose requirements its slot satisfies, whoever submitted it, and
``Memory >= 8192`` is ``(Memory >= 8192)``.

The slot ad is the machine ad a slave on Condor has (``_CONDOR_MACHINE_AD``,
sent in its Hello); a slave with none (a local slave, or one whose ad could not
be read or parsed) is judged against an ad of its shape alone: ``Cpus``,
``Memory`` (MB), ``Disk`` (KB, as a machine ad counts it) and ``GPUs``. Either
way a slave also serves the requirements it offers itself (``--mw-slave-resources
requirements=EXPR``, or the need its Condor job was submitted for), compared as
text: a local slave can stand for a custom attribute it does not have.

The verdict is kept per slave and need (:class:`Offer`), so dispatch evaluates
an expression once per pair, not once per task, and the machine ad is parsed
once per slave, when a need with requirements first asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mwpy.resources import Resources

if TYPE_CHECKING:
    import classad2

#: A slave's verdict cache bigger than this starts again: needs are few, this only bounds it.
MAX_VERDICTS = 1024


class Offer:
    """What one slave offers (its shape, and its slot's machine ad as ClassAd text, "" for none), and its
    verdicts on the needs it was asked about."""

    __slots__ = ("_ad", "_ad_text", "_verdicts", "shape")

    def __init__(self, shape: Resources, machine_ad: str = "") -> None:
        self.shape = shape
        self._ad_text = machine_ad
        self._ad: classad2.ClassAd | None = None
        self._verdicts: dict[Resources, bool] = {}

    def serves(self, need: Resources) -> bool:
        """Whether this slave may run a task that needs ``need`` (evaluated once per need)."""
        verdict = self._verdicts.get(need)
        if verdict is None:
            if len(self._verdicts) >= MAX_VERDICTS:
                self._verdicts.clear()
            slot = self._slot_ad() if need.requirements else None
            verdict = self._verdicts[need] = self.shape.satisfies(need, slot)
        return verdict

    def _slot_ad(self) -> classad2.ClassAd | None:
        """The slave's machine ad, parsed once; None when it has none or it does not parse (its shape counts)."""
        if self._ad is None and self._ad_text:
            import classad2  # noqa: PLC0415 -- only needs with requirements pay for HTCondor's library

            try:
                self._ad = classad2.parseOne(self._ad_text)
            except (ValueError, TypeError, RuntimeError, classad2.ClassAdException):
                self._ad_text = ""
        return self._ad
