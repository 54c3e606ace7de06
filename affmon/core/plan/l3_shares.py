"""How the ranks of one domain divide its cores when the domain holds several L3 caches
(AMD EPYC with NPS1/NPS2: one L3 per CCX or CCD, several per NUMA node). Pure.

Balance is the rule: the ranks' core counts differ by at most one (the even split of
``even_split``), because the slowest rank sets the pace of every rank of the job. Whole
L3 caches are a preference within that rule: the shares tile the cores in L3 order, and
which ranks take the one core more (where the cores do not divide evenly) is chosen so
that the fewest caches are split between two ranks; among divisions that split as few,
the larger shares go to the lowest ranks, as in torch's ``exclusive`` binding. A node of
three 8-core L3 caches and two GPUs gets 12 and 12 cores (the middle cache split), not
16 and 8; three caches of 8 and three ranks get one cache each; four ranks on two caches
of 8 get 4 cores each inside one cache.

With one L3 group in the domain (most Intel nodes) or none known, this is the plain even
split, remainder cores to the lowest ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from affmon.core.model.cpuset import CpuSet
from affmon.core.model.domains import even_split, plural, slices

Share = Sequence[CpuSet]


class RankShares(NamedTuple):
    """How the ranks of one domain divide its cores (``rank_shares``)."""

    shares: list[Share]  # each rank's cores, in rank order
    note: str | None  # why, where the L3 groups shaped the shares; None: the plain even split


def l3_runs(units: Sequence[CpuSet], l3_of: dict[int, int]) -> list[list[CpuSet]]:
    """``units`` (in L3 order) cut where their L3 group changes; units in no group form one run."""
    runs: list[list[CpuSet]] = []
    last: int | None = None
    for unit in units:
        key = l3_of.get(min(unit), -1)
        if not runs or key != last:
            runs.append([])
        runs[-1].append(unit)
        last = key
    return runs


def rank_shares(units: Sequence[CpuSet], n_ranks: int, l3_of: dict[int, int], level: int = 3) -> RankShares | None:
    """Each rank's cores, in rank order, and a sentence when the L3 groups shaped the
    shares (``RankShares``). None when there are fewer cores than ranks (every rank then
    shares the whole domain)."""
    sizes = even_split(len(units), n_ranks)
    if sizes is None:
        return None
    runs = l3_runs(units, l3_of)
    plain = slices(units, sizes)
    if len(runs) <= 1:
        return RankShares(plain, None)
    ends: set[int] = set()
    total = 0
    for run in runs:
        total += len(run)
        ends.add(total)
    shaped = _fewest_split(len(units), n_ranks, frozenset(ends))
    shares = slices(units, shaped)
    if shaped == sizes:
        return RankShares(shares, None)  # the even split, remainder to the lowest ranks, splits no more caches
    split = sum(1 for cut in _cuts(shaped) if cut not in ends)
    cache_name = f"L{level}"
    if not split:
        why = (
            f"The {len(runs)} {cache_name} caches of the domain are divided whole among {plural(n_ranks, 'rank')}, "
            f"so no two ranks share an {cache_name}; the shares differ by at most one core."
        )
    else:
        why = (
            f"The shares differ by at most one core (the slowest rank sets the pace of every rank); within that, "
            f"the cores left over go where they split the fewest of the domain's {len(runs)} {cache_name} caches "
            f"({split} split between two ranks)."
        )
    return RankShares(shares, why)


def _cuts(sizes: Sequence[int]) -> list[int]:
    """Where one rank's share ends and the next one's starts, as counts of cores."""
    cuts, total = [], 0
    for size in sizes[:-1]:
        total += size
        cuts.append(total)
    return cuts


def _fewest_split(n_units: int, n_ranks: int, ends: frozenset[int]) -> list[int]:
    """Core counts for the ranks, each the even share or one more (as many of those as the
    remainder), ordered so that the fewest cuts between ranks fall inside an L3 group
    (``ends``: where each group ends, counted in cores); ties to the larger shares first."""
    base, extra = divmod(n_units, n_ranks)

    def steps(rank: int, larger: int) -> list[tuple[int, int]]:
        """(one more core or not, whether the cut after this rank falls inside a group) for
        rank ``rank`` when ``larger`` ranks before it took one more, the larger first."""
        found = []
        for more in (1, 0):
            if larger + more > extra or extra - larger - more > n_ranks - rank - 1:
                continue  # too many larger shares, or too few ranks left for the rest
            cut = rank * base + larger + base + more
            found.append((more, 0 if rank == n_ranks - 1 or cut in ends else 1))
        return found

    # fewest[rank][larger]: the fewest cuts inside a group for ranks rank.., bottom up.
    fewest = [[0] * (extra + 1) for _ in range(n_ranks + 1)]
    for rank in range(n_ranks - 1, -1, -1):
        for larger in range(min(rank, extra) + 1):
            options = [inside + fewest[rank + 1][larger + more] for more, inside in steps(rank, larger)]
            fewest[rank][larger] = min(options, default=n_units)
    sizes: list[int] = []
    larger = 0
    for rank in range(n_ranks):
        choices = [(inside + fewest[rank + 1][larger + more], more) for more, inside in steps(rank, larger)]
        more = min(choices, key=lambda choice: choice[0])[1]  # min keeps the first of equals: the larger
        sizes.append(base + more)
        larger += more
    return sizes
