"""measure.units: link rates in the unit people quote them in."""

import pytest

from dlbench.measure.units import fmt_bps


@pytest.mark.parametrize("bps, text", [
    (0.0, "0 bit/s"),
    (999.0, "999 bit/s"),
    (1e3, "1 kbit/s"),
    (16e6, "16 Mbit/s"),
    (2.5e9, "2.5 Gbit/s"),
    (1e12, "1 Tbit/s"),
    (123_456_789.0, "123 Mbit/s"),   # three significant figures
    (float("inf"), "inf"),
])
def test_rates_take_the_largest_unit_they_reach(bps, text):
    assert fmt_bps(bps) == text
