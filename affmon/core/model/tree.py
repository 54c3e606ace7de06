"""The process tree, from a parent map (each PID's parent PID, as ``/proc/PID/stat`` gives
it): a process's ancestors, the processes below a set of roots, and the nearest of a set
of roots above a process. Every walk up or down the tree in affmon is one of these. Pure.

A parent map read from ``/proc`` need not be a tree. The processes are read one after the
other, not at one instant: a PID that exits and is given out again between two reads can
close a loop (A's parent read as B, B's parent as A), and a recording can hold one too.
A parent that is not in the map (it exited, another user's process hidden by ``hidepid``,
PID 0 above init and kthreadd, a process not sampled) ends a walk up. Every walk keeps the
PIDs it has passed and stops at one it meets again, so a loop ends it instead of hanging
it.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Mapping

# PID -> parent PID; None where the parent is unknown (a recording without it), which ends
# a walk up as a parent missing from the map does.
ParentMap = Mapping[int, int | None]


def ancestors(pid: int, parents: ParentMap) -> Iterator[int]:
    """The ancestors of ``pid``, nearest first, made as they are read (a caller that stops
    early walks no further): each parent that is in ``parents``. It stops at a parent not
    in the map and at one already passed (a loop back to ``pid`` or to one above it)."""
    seen = {pid}
    up = parents.get(pid)
    while up is not None and up in parents and up not in seen:
        yield up
        seen.add(up)
        up = parents[up]


def root_of(pid: int, roots: Container[int], parents: ParentMap) -> int | None:
    """The nearest of ``roots`` at or above ``pid``: ``pid`` itself when it is one, else the
    first of its ``ancestors`` that is; None when the walk ends before reaching one."""
    if pid in roots:
        return pid
    return next((up for up in ancestors(pid, parents) if up in roots), None)


def descendants(roots: Iterable[int], parents: ParentMap) -> set[int]:
    """``roots`` and every PID below them: each PID of ``parents`` whose chain of parents
    reaches one of ``roots``. A root need not be in the map (its children are found all the
    same). Each PID is taken once, so a loop in the map ends the walk."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        if ppid is not None:
            children.setdefault(ppid, []).append(pid)
    found = set(roots)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found
