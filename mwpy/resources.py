"""What a task needs of a slave, and what a slave offers: :class:`Resources`.

One record for both sides, in HTCondor's own terms (``request_cpus``,
``request_memory``, ``request_disk``, ``request_gpus``, ``requirements``), so
that a task's need can become a slave job's request as it is. A task says
``@mwpy.task(resources=mwpy.Resources(memory="16GB"))``; a slave says what it
has with ``--mw-slave-resources "cpus=4,memory=16GB"``, or learns it from its
Condor slot, or else from the machine it runs on (:func:`own_shape`).

Memory and disk are whole MB (HTCondor's unit for ``request_memory``; for disk
too, where HTCondor's ``request_disk`` counts KB: one unit for both is less to
get wrong). HTCondor's unit strings ("16GB", "512 MB", "2T") are accepted.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from mwpy.errors import UsageError
from mwpy.job_ad import ad_string, read_ad
from mwpy.names import JOB_AD_VARIABLE, MACHINE_AD_VARIABLE, SHAPE_ATTRIBUTE

if TYPE_CHECKING:
    import classad2

#: The keys of a resources dict or text, in the order they are shown.
KEYS = ("cpus", "memory", "disk", "gpus", "requirements")
_UNITS = {"": 1, "K": 1 / 1024, "M": 1, "G": 1 << 10, "T": 1 << 20, "P": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGTP]?)(?:B|IB)?\s*$", re.IGNORECASE)
#: HTCondor's machine-ad attributes of a slot, and a job ad's requests (Disk and RequestDisk in KB).
_MACHINE_AD = {"Cpus": "cpus", "Memory": "memory", "Disk": "disk", "GPUs": "gpus"}
_JOB_AD = {"RequestCpus": "cpus", "RequestMemory": "memory", "RequestDisk": "disk", "RequestGPUs": "gpus"}


def megabytes(value: object, name: str) -> int:
    """``16384``, ``"16GB"``, ``"512 MB"``, ``"1.5G"`` as whole MB (rounded up); UsageError naming ``name``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    found = _SIZE.match(value) if isinstance(value, str) else None
    if found is None:
        raise UsageError(f"resources: {name} must be MB or a size such as '16GB', not {value!r}")
    return math.ceil(float(found.group(1)) * _UNITS[found.group(2).upper()])


def _count(value: object, name: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise UsageError(f"resources: {name} must be a non-negative integer, not {value!r}")
    return value


def _cpus(value: object) -> int:
    return _count(value, "cpus")


def _gpus(value: object) -> int:
    return _count(value, "gpus")


def _memory(value: object) -> int:
    return megabytes(value, "memory")


def _disk(value: object) -> int:
    return megabytes(value, "disk")


def _requirements(value: object) -> str:
    """An expression in one form, so that needs that differ only in how they were written are one need (one
    demand, one shape of slave jobs): as HTCondor's ClassAd library prints it, less parentheses around it all."""
    if not isinstance(value, str):
        raise UsageError(f"resources: requirements must be a ClassAd expression as text, not {value!r}")
    text = " ".join(value.split())
    if not text:
        return text
    import classad2  # noqa: PLC0415 -- only needs with requirements pay for HTCondor's library

    try:
        text = str(classad2.ExprTree(text))
        while text.startswith("(") and text.endswith(")"):
            text = str(classad2.ExprTree(text[1:-1]))  # "(a) && (b)" less its ends does not parse: it stays
    except classad2.ClassAdException:
        pass  # kept as written: it matches no slot (meets)
    return text


@attrs.frozen(cache_hash=True)  # a key of every slave's verdicts (mwpy/matching.py), looked up per dispatch
class Resources:
    """What a task needs (or a slave offers): cpus, memory and disk in MB, gpus, a Condor requirements expression.

    Zero (and ``""``) means not asked. ``Resources(memory="16GB")`` holds
    ``memory=16384``. A slave satisfies a need when it has at least as much of
    each, and its slot meets the need's requirements, evaluated as HTCondor
    matches a job to a slot (mwpy/matching.py).
    """

    cpus: int = attrs.field(default=0, converter=_cpus)
    memory: int = attrs.field(default=0, converter=_memory)
    disk: int = attrs.field(default=0, converter=_disk)
    gpus: int = attrs.field(default=0, converter=_gpus)
    requirements: str = attrs.field(default="", converter=_requirements)

    @classmethod
    def of(cls, value: Resources | Mapping[str, Any] | str | None) -> Resources | None:
        """``resources=`` as given to ``@mwpy.task``, ``with_policy`` or the Executor: a record, a dict, the
        option's text (``"cpus=2,memory=16GB"``) or None.

        An empty need is None: such a task runs anywhere, as a task without resources.
        """
        if value is None:
            return None
        if isinstance(value, str):
            value = cls.parse(value)
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - set(KEYS), key=str)
            if unknown:
                raise UsageError(f"resources: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
            value = cls(**value)
        if not isinstance(value, Resources):
            raise UsageError(f"resources must be a mwpy.Resources or a dict, not {type(value).__name__}")
        return None if value == cls() else value

    @classmethod
    def parse(cls, text: str) -> Resources:
        """``"cpus=4,memory=16GB,gpus=1"`` (the option's form; ``requirements=`` last, as it may hold commas)."""
        values: dict[str, str] = {}
        rest = text.strip()
        while rest:
            key, equals, rest = rest.partition("=")
            key = key.strip().lower()
            if not equals or key not in KEYS:
                raise UsageError(f"resources: expected KEY=VALUE with KEY one of {', '.join(KEYS)}: {text!r}")
            if key == "requirements":
                value, rest = rest, ""
            else:
                value, _, rest = rest.partition(",")
            values[key] = value.strip()
        return cls(**values)

    def __str__(self) -> str:
        """The option's form, with what is asked only: ``cpus=4,memory=16384`` (MB)."""
        parts = [f"{key}={getattr(self, key)}" for key in KEYS if getattr(self, key)]
        return ",".join(parts) or "cpus=0"

    def describe(self) -> str:
        """For people: ``cpus 4, memory 16384 MB, gpus 1``."""
        units = {"memory": " MB", "disk": " MB"}
        parts = [f"{key} {getattr(self, key)}{units.get(key, '')}" for key in KEYS if getattr(self, key)]
        return ", ".join(parts) or "nothing"

    def over(self, base: Resources) -> Resources:
        """This shape, with what it leaves out (zero, ``""``) taken from ``base``."""
        return Resources(*(getattr(self, key) or getattr(base, key) for key in KEYS))

    def holds(self, need: Resources) -> bool:
        """Whether this shape has at least the cpus, memory, disk and gpus ``need`` asks for."""
        return (
            self.cpus >= need.cpus and self.memory >= need.memory and self.disk >= need.disk and self.gpus >= need.gpus
        )

    def satisfies(self, need: Resources, slot: classad2.ClassAd | None = None) -> bool:
        """Whether a slave of this shape, in the slot whose machine ad is ``slot``, can run a task that needs
        ``need``: it :meth:`holds` it, and the need's requirements are the shape's own (as text) or are true of
        the slot (:func:`meets`; no ``slot``: an ad of this shape alone, :meth:`as_slot_ad`)."""
        if not self.holds(need):
            return False
        if not need.requirements or need.requirements == self.requirements:
            return True
        return meets(need, self.as_slot_ad() if slot is None else slot)

    def as_slot_ad(self) -> classad2.ClassAd:
        """A slot ad of this shape alone, in a machine ad's terms and units: ``Cpus``, ``Memory`` (MB), ``Disk``
        (KB), ``GPUs`` -- what a slave without a machine ad (a local one) is judged by."""
        import classad2  # noqa: PLC0415 -- only needs with requirements pay for HTCondor's library

        return classad2.ClassAd({"Cpus": self.cpus, "Memory": self.memory, "Disk": self.disk * 1024, "GPUs": self.gpus})


def meets(need: Resources, slot: classad2.ClassAd) -> bool:
    """Whether ``need``'s requirements are true of the slot ad ``slot``, evaluated as HTCondor's negotiator
    evaluates a job's ``Requirements``: in an ad of the need's ``RequestCpus``, ``RequestMemory``,
    ``RequestDisk`` (KB) and ``RequestGPUs`` (MY) against the slot (TARGET). So ``Memory >= 8192`` is
    ``(Memory >= 8192)``, and numbers compare as numbers. An expression that does not parse, or is not true
    (false, undefined, an error), does not match."""
    import classad2  # noqa: PLC0415 -- only needs with requirements pay for HTCondor's library

    _load_match_semantics()

    try:
        job = classad2.ClassAd(
            {"RequestCpus": need.cpus, "RequestMemory": need.memory, "RequestDisk": need.disk * 1024}
        )
        job["RequestGPUs"] = need.gpus
        job["Requirements"] = classad2.ExprTree(need.requirements)
        return bool(slot.matches(job))
    except (ValueError, TypeError, RuntimeError, classad2.ClassAdException):
        return False


def _load_match_semantics() -> None:
    """Set HTCondor's ClassAd library up for matching as HTCondor's own tools set it up.

    Importing ``htcondor2`` reads HTCondor's configuration, which turns on the negotiator's match semantics: a
    name the job ad lacks (``Memory`` in ``Memory >= 8192``) is looked up in the slot ad. Without it, in a
    process that has not yet parsed an ad, that name is undefined and no slot ever matched such a need.
    """
    import htcondor2  # noqa: F401, PLC0415 -- its import is the set-up; only needs with requirements pay for it


def slave_shape(text: str) -> Resources:
    """A ``--slave-resources`` value for argparse: its own one-line error (ArgumentTypeError) when wrong."""
    try:
        return Resources.parse(text)
    except UsageError as exc:
        import argparse  # noqa: PLC0415 (only the overseer's command line gets here: a slave need not load it)

        raise argparse.ArgumentTypeError(str(exc).removeprefix("resources: ")) from None


def own_shape(given: Resources | None = None) -> Resources:
    """What a slave here offers: ``given`` (``--mw-slave-resources``), with what it leaves out taken from its
    Condor job's requests, else its slot's machine ad, else this machine.

    The job's requests come first: a site holds a job that uses more memory than it asked for (the slot may
    have more, a static slot its whole share of the machine). A job the overseer submitted for a need
    (``MwpyShape`` in its ad) has that need's requirements: its slot met them.
    """
    shape = machine_shape()
    for variable, names in ((MACHINE_AD_VARIABLE, _MACHINE_AD), (JOB_AD_VARIABLE, _JOB_AD)):  # a later one wins
        found = _from_ad(variable, names)
        if found is not None:
            shape = found.over(shape)
    shape = attrs.evolve(shape, requirements=_submitted_for().requirements or shape.requirements)
    return shape if given is None else given.over(shape)


def _submitted_for() -> Resources:
    """The need this Condor job was submitted for (its ``MwpyShape``), or no need (odd or absent)."""
    text = ad_string(read_ad(JOB_AD_VARIABLE).get(SHAPE_ATTRIBUTE.lower()))
    try:
        return Resources.parse(text)
    except UsageError:
        return Resources()


def machine_shape() -> Resources:
    """This machine: its usable cpus and its physical memory (no disk or gpus claimed)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (ValueError, OSError, AttributeError):
        memory = 0
    return Resources(cpus=cpus, memory=memory)


def _from_ad(variable: str, names: Mapping[str, str]) -> Resources | None:
    """The integer-valued attributes ``names`` of the ClassAd file the environment variable ``variable`` names
    (mwpy/job_ad.py reads it); None when it has none (or is unsafe)."""
    ad = read_ad(variable)
    found = {key: int(ad[name.lower()]) for name, key in names.items() if ad.get(name.lower(), "").isdigit()}
    if "cpus" not in found and "memory" not in found:
        return None
    if "disk" in found:
        found["disk"] //= 1024  # KB in an ad
    return Resources(**found)
