"""The order in which the configurations of a timing comparison take their turns on each problem.

On a CPU a decode's time depends on the decode before it (caches, the allocator, the clock: a decode
after a 15-branch one measured up to 7% slower than after a vanilla one), so a fixed order, even
rotated, hands each configuration the same predecessor every time and biases the comparison. A
Williams design balances that: over n consecutive problems (2n when n is odd) every configuration
follows every other equally often (Williams, 1949, Aust. J. Sci. Res. A 2:149).
"""

from __future__ import annotations


def williams(n: int, i: int) -> list[int]:
    """Order i (any i >= 0; they cycle) of the Williams design for n configurations: a permutation of
    0..n-1. Order r of the base square is 0, 1, n-1, 2, n-2, ... shifted by r (mod n); an odd n adds
    the n mirrored orders."""
    base = [0] + [(j + 1) // 2 if j % 2 else (n - j // 2) % n for j in range(1, n)]
    r = i % (n if n % 2 == 0 else 2 * n)
    order = [(a + r) % n for a in base]
    return order if r < n else order[::-1]


def in_turns(items: list, i: int) -> list:
    """`items` in the order problem (or repeat) i gives them their turns."""
    return [items[j] for j in williams(len(items), i)]
