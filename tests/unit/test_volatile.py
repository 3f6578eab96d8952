"""reprobuild.checks.volatile: what verify leaves out of a line that holds a wall-clock field."""

from __future__ import annotations

from reprobuild.checks.volatile import Masker, rules_for


def test_a_banner_centred_around_a_duration_compares_alike() -> None:
    """pytest's summary line fills its ends to the line's width: 8.80s and 10.30s leave one `=`
    apart (rl-replicas' own test under verify). Only a masked line's ends are counted so."""
    masker = Masker(rules_for([]))
    one = masker.key(78, "=" * 30 + " 1 passed in 8.80s " + "=" * 31)
    two = masker.key(78, "=" * 30 + " 1 passed in 10.30s " + "=" * 30)
    assert one == two == "=== 1 passed in <duration> ==="
    assert masker.key(1, "=== no field ====") == "=== no field ===="
