"""The Williams order of timing comparisons (lopa/tasks/turns.py)."""

from collections import Counter

import pytest

from lopa.tasks.turns import in_turns, williams


@pytest.mark.parametrize("n", range(1, 9))
def test_every_configuration_follows_every_other_equally_often(n):
    cycle = n if n % 2 == 0 else 2 * n
    orders = [williams(n, i) for i in range(cycle)]
    assert all(sorted(o) == list(range(n)) for o in orders)                      # each a permutation
    pairs = Counter((o[j], o[j + 1]) for o in orders for j in range(n - 1))
    assert len(pairs) == n * (n - 1) and len(set(pairs.values())) <= 1          # every ordered pair, equally often
    firsts = Counter(o[0] for o in orders)
    assert len(firsts) == n and len(set(firsts.values())) == 1                   # each goes first equally often
    assert williams(n, cycle) == orders[0]                                        # the orders cycle


def test_in_turns_reorders_the_items_themselves():
    items = ["d2f", "lopa-k1", "lopa-k4", "lopa-k14"]
    assert in_turns(items, 0) == ["d2f", "lopa-k1", "lopa-k14", "lopa-k4"]       # 0, 1, n-1, 2
    assert in_turns(items, 1) == ["lopa-k1", "lopa-k4", "d2f", "lopa-k14"]       # shifted by one
