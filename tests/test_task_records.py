"""Task records built on the hot path must equal what the general (slower) constructors give."""

from __future__ import annotations

import attrs

from mwpy.task import Policy


def test_a_per_item_policy_keeps_every_other_field() -> None:
    """mw.map's Policy.for_item passes every field by position: a field added to Policy must not be dropped."""
    policy = Policy(
        sid="s", tag="t", retry=False, do_it_anyway=True, key="old", retries=2, retry_on=(OSError,), timeout=1.5
    )
    assert {field.name for field in attrs.fields(Policy)} == {
        "sid", "tag", "retry", "do_it_anyway", "key", "retries", "retry_on", "timeout",
    }  # fmt: skip
    assert policy.for_item(7, "k") == attrs.evolve(policy, tag=7, key="k")
    assert policy.for_item(7, None) == attrs.evolve(policy, tag=7, key=None)
