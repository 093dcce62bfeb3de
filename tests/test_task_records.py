"""The task a master algorithm sees (``mwpy.Task``) against the scheduler's own record of it."""

from __future__ import annotations

import attrs

from mwpy.core.entry import Entry
from mwpy.task_records import Policy
from tests.support import QUIET

POLICY = Policy(
    sid="s", tag="t", retry=False, do_it_anyway=True, key="old", retries=2, retry_on=(OSError,), timeout=1.5
)


def test_a_task_as_the_algorithm_sees_it_keeps_its_policy_and_its_own_tag_and_key() -> None:
    """mw.map gives each item its position as tag and its own key without a policy per item: the public task
    shows them in its policy, every other field as submitted."""
    entry = Entry(7, "f", b"payload", POLICY, QUIET, tag=3, key="k")
    task = entry.task()
    assert (task.task_id, task.algorithm, task.payload, task.tag, task.sid) == (7, "f", b"payload", 3, "s")
    assert task.policy == attrs.evolve(POLICY, tag=3, key="k")
    plain = Entry(8, "f", b"", POLICY, QUIET, tag=POLICY.tag, key=POLICY.key).task()
    assert plain.policy is POLICY  # nothing to change: the policy itself
    tagged = Entry(9, "f", b"", POLICY, QUIET, tag=4, key=POLICY.key).task()
    assert tagged.policy == attrs.evolve(POLICY, tag=4)  # its own position, the policy's key


def test_the_public_task_carries_no_bookkeeping() -> None:
    assert [field.name for field in attrs.fields(type(Entry(1, "f", b"", POLICY, QUIET).task()))] == [
        "task_id", "algorithm", "payload", "policy",
    ]  # fmt: skip
