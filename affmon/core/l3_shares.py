"""How the ranks of one domain divide its cores when the domain holds several L3 caches
(AMD EPYC with NPS1/NPS2: one L3 per CCX or CCD, several per NUMA node). Pure.

Two rules, applied to cores already ordered by L3 group (``core_units``):

* As many L3 groups as ranks, or more: each rank gets whole L3 groups, contiguous in L3
  order, so no two ranks share an L3. The groups are divided so that the ranks' core
  counts are as even as whole groups allow (least sum of squares), the larger runs to
  the lowest ranks.
* Fewer L3 groups than ranks: each rank stays inside one L3 group (its share fits in
  one, so it is never split over two). Every group gets at least one rank, and each
  further rank goes to the group whose ranks would keep the most cores each; a group's
  cores are then split evenly among its ranks.

With one L3 group in the domain (most Intel nodes) or none known, this is the plain even
split of ``even_split``, remainder cores to the lowest ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from affmon.core.cpuset import CpuSet
from affmon.core.domains import even_split, plural, slices

Share = Sequence[CpuSet]


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


def rank_shares(
    units: Sequence[CpuSet], n_ranks: int, l3_of: dict[int, int], level: int = 3
) -> tuple[list[Share], str | None] | None:
    """Each rank's cores, in rank order, and a sentence when the L3 groups shaped the
    shares (None when it is the plain even split). None when there are fewer cores than
    ranks (every rank then shares the whole domain)."""
    sizes = even_split(len(units), n_ranks)
    if sizes is None:
        return None
    runs = l3_runs(units, l3_of)
    if len(runs) <= 1:
        return slices(units, sizes), None
    cache_name = f"L{level}"
    if len(runs) >= n_ranks:
        cuts = _whole_groups([len(r) for r in runs], n_ranks)
        shares: list[Share] = []
        start = 0
        for count in cuts:
            shares.append([u for run in runs[start : start + count] for u in run])
            start += count
        if [list(s) for s in shares] == [list(s) for s in slices(units, sizes)]:
            return shares, None  # the even split already keeps to whole groups
        why = (
            f"The {len(runs)} {cache_name} caches of the domain are divided whole among {plural(n_ranks, 'rank')}, "
            f"so no two ranks share an {cache_name}."
        )
        return shares, why
    per_group = _ranks_per_group([len(r) for r in runs], n_ranks)
    shares = []
    for run, ranks in zip(runs, per_group, strict=True):
        split = even_split(len(run), ranks)
        assert split is not None, "a group never gets more ranks than cores"
        shares += slices(run, split)
    why = (
        f"The domain has {len(runs)} {cache_name} caches for {plural(n_ranks, 'rank')}: each rank keeps to one "
        f"{cache_name}, shared by at most {max(per_group)} ranks."
    )
    return shares, why


def _whole_groups(group_sizes: Sequence[int], n_ranks: int) -> list[int]:
    """How many consecutive groups each rank gets: the most even core counts (least sum of
    squares), ties to the division giving the lowest ranks the most cores."""
    sizes = tuple(group_sizes)

    @cache
    def best(start: int, ranks: int) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """(sum of squares, negated core counts, group counts) for groups[start:] among ``ranks``."""
        if ranks == 1:
            cores = sum(sizes[start:])
            return cores * cores, (-cores,), (len(sizes) - start,)
        found: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None
        for count in range(1, len(sizes) - start - ranks + 2):
            cores = sum(sizes[start : start + count])
            cost, key, counts = best(start + count, ranks - 1)
            option = (cost + cores * cores, (-cores, *key), (count, *counts))
            if found is None or option[:2] < found[:2]:
                found = option
        assert found is not None
        return found

    return list(best(0, n_ranks)[2])


def _ranks_per_group(group_sizes: Sequence[int], n_ranks: int) -> list[int]:
    """One rank per group, then each further rank to the group whose ranks would keep the
    most cores each (ties to the lowest group), never more ranks than a group has cores."""
    counts = [1] * len(group_sizes)
    for _ in range(n_ranks - len(group_sizes)):
        open_groups = [i for i, size in enumerate(group_sizes) if counts[i] < size]
        pick = max(open_groups, key=lambda i: (group_sizes[i] / (counts[i] + 1), -i))
        counts[pick] += 1
    return counts
