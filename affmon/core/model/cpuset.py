"""CPU-set arithmetic in the kernel's own spellings.

A CPU set is a ``frozenset[int]`` of OS CPU ids (the ids ``/proc`` and
``sched_setaffinity`` use, never hwloc's logical indexes). Two text forms exist:

* the *cpulist* (``/sys/.../cpulist``, ``Cpus_allowed_list``): ``0-7,16-23``;
* the *mask*: the kernel's comma-separated 32-bit hex words, most significant first
  (``ff,ffffffff``), and hwloc's spelling of the same with ``0x`` on each word
  (``0x000000ff,0xffffffff``).
"""

from __future__ import annotations

from collections.abc import Iterable

from affmon.core.errors import ParseError

CpuSet = frozenset[int]

EMPTY: CpuSet = frozenset()

# No Linux build supports more CPUs than this (CONFIG_NR_CPUS max is 8192); a bigger
# id in a cpulist is garbage, not a machine, and must not make us allocate a huge set.
MAX_CPU_ID = 1 << 16


def parse_cpulist(text: str) -> CpuSet:
    """Parse a kernel cpulist such as ``0-3,8,10-11`` (empty text is the empty set).

    Also accepts the ``a-b:stride`` form some kernels print (``0-15:2``).
    """
    text = text.strip()
    if not text:
        return EMPTY
    value = 0  # bit n set: CPU n is in the list
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ParseError(f"empty item in cpulist {text[:60]!r}")
        stride = 1
        if ":" in part:
            part, _, stride_text = part.partition(":")
            stride = _parse_id(stride_text, text)
            if stride < 1:
                raise ParseError(f"bad stride in cpulist {text[:60]!r}")
        first_text, dash, last_text = part.partition("-")
        first = _parse_id(first_text, text)
        last = _parse_id(last_text, text) if dash else first
        if last < first:
            raise ParseError(f"descending range in cpulist {text[:60]!r}")
        # One bit every ``stride`` bits, ``count`` times, in one big-integer expression:
        # an item costs the same whatever its size. (Enumerating each range id by id
        # made 10,000 copies of 0-65536 take 18 s.)
        count = (last - first) // stride + 1
        value |= ((1 << (count * stride)) - 1) // ((1 << stride) - 1) << first
    return _bits(value)


def _bits(value: int) -> CpuSet:
    """The positions of the set bits of ``value``, in time linear in its length."""
    return frozenset(i for i, digit in enumerate(reversed(bin(value)[2:])) if digit == "1")


def _parse_id(item: str, whole: str) -> int:
    item = item.strip()
    if not item.isdigit() or not item.isascii():
        raise ParseError(f"not a CPU number: {item[:20]!r} in cpulist {whole[:60]!r}")
    if len(item.lstrip("0")) > len(str(MAX_CPU_ID)):  # before int(): 5,000 digits raise ValueError
        raise ParseError(f"CPU id {item[:20]}... too large in cpulist {whole[:60]!r}")
    value = int(item)
    if value > MAX_CPU_ID:
        raise ParseError(f"CPU id {value} too large in cpulist {whole[:60]!r}")
    return value


def format_cpulist(cpus: Iterable[int]) -> str:
    """Canonical kernel cpulist: sorted; every run of consecutive ids becomes ``a-b``
    and lone ids stay alone, as the kernel prints them (``0-1``, ``3``, ``5-7``)."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def parse_cpumask(text: str) -> CpuSet:
    """Parse a kernel hex mask (``ff,ffffffff``) or hwloc's (``0x000000ff,0xffffffff``).

    Words are comma-separated, most significant first; each word is 32 bits in the
    kernel's spelling. hwloc writes ``0x0`` for the empty set and leaves all-zero words
    out between commas (``0x000000ff,,,0x000000ff``); the kernel never does, so an
    empty word is accepted only in hwloc's ``0x`` spelling. hwloc's infinite sets
    (``0xf...f,...``) have no finite meaning for a real machine and are rejected.
    """
    text = text.strip()
    if not text:
        raise ParseError("empty CPU mask")
    words = text.split(",")
    hwloc_spelling = "0x" in text.lower()
    value = 0
    for word in words:
        word = word.strip()
        if not word and hwloc_spelling:
            word = "0"  # an elided all-zero word
        elif word.lower().startswith("0x"):
            word = word[2:]
        if "..." in word:
            raise ParseError(f"infinite CPU mask {text[:60]!r}")
        if not word or len(word) > 8 or any(c not in "0123456789abcdefABCDEF" for c in word):
            raise ParseError(f"bad word {word[:20]!r} in CPU mask {text[:60]!r}")
        value = (value << 32) | int(word, 16)
        # Checked at every word, not once at the end: hwloc's elided zero words let a
        # short file (``0x1`` and a million commas) grow the number without bound.
        if value.bit_length() > MAX_CPU_ID + 1:
            raise ParseError(f"CPU mask {text[:40]!r}... too large")
    return _bits(value)


def format_cpumask(cpus: Iterable[int]) -> str:
    """The kernel's hex mask for a CPU set (``ff,ffffffff``), as ``taskset -p`` shows."""
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if not value:
            break
    first, *rest = reversed(words)
    return ",".join([f"{first:x}", *(f"{w:08x}" for w in rest)])


def in_cpuset(requested: CpuSet, allowed: CpuSet) -> CpuSet:
    """The mask the kernel gives a task that asked for ``requested`` inside a cpuset that
    allows ``allowed``: their common CPUs, or the whole cpuset when they have none (a
    cpuset that shrank away from the request). The kernel keeps the request and applies it
    again whenever the cpuset changes."""
    return (requested & allowed) or allowed
