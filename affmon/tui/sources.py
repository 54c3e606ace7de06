"""Where the app's samples come from: this machine (``LiveSource``) or a recording
(``ReplaySource``). Both are driven by the app's sampler worker, one call per tick, from
one thread at a time; neither touches the UI.

A source gives the topology and the header's facts (``info``), the next ``Sample``, how
long to wait before the one after (``pace_s``), and the masks affmon itself pinned (for
the AFFINITY_DRIFT rule).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Mapping
from typing import Protocol

from affmon.core.cpuset import CpuSet
from affmon.core.errors import ParseError, SourceError
from affmon.core.monitor import SourceInfo
from affmon.core.recording import Header, read_recording, sample_from_json
from affmon.core.samples import Sample
from affmon.core.topology import Topology


class Source(Protocol):
    topology: Topology
    info: SourceInfo

    def next_sample(self) -> Sample | None:
        """The next tick's sample; None when there is none (a replay that ended)."""
        ...

    @property
    def exhausted(self) -> bool:
        """True once the sample just returned was the last one."""
        ...

    def pace_s(self) -> float:
        """Seconds to wait, after a tick finishes, before the next."""
        ...

    def expected_masks(self) -> Mapping[int, CpuSet]: ...

    def close(self) -> None: ...


class LiveSource:
    """Every process on this machine (training ones watched, or ``pids`` and their
    descendants), every thread of them, and NVML when there is one."""

    def __init__(self, pids: tuple[int, ...] = (), interval_s: float = 1.0, root: str = "/") -> None:
        from affmon.collect.sampler import Selection
        from affmon.commands.common import open_live_sources

        self._sources = open_live_sources(Selection(pids=pids, others=True), root)
        self.topology = self._sources.topology
        self.sampler = self._sources.sampler
        self.interval_s = interval_s
        self.info = SourceInfo(self._sources.host, self._sources.nvml_status, interval_s, "live")

    def next_sample(self) -> Sample:
        return self.sampler.sample()

    @property
    def exhausted(self) -> bool:
        return False

    def pace_s(self) -> float:
        return self.interval_s

    def expected_masks(self) -> Mapping[int, CpuSet]:
        from affmon.actions.journal import pinned_masks

        return pinned_masks()

    def close(self) -> None:
        self._sources.close()


def read_lines(path: str) -> list[str]:
    """The lines of a recording, gzip or plain (told apart by the gzip magic bytes)."""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        if gz:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read().splitlines()
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        raise SourceError(f"--replay {path}: no such file") from None
    except IsADirectoryError:
        raise SourceError(f"--replay {path}: is a directory, not a recording") from None
    except OSError as exc:  # gzip.BadGzipFile is an OSError too
        raise SourceError(f"--replay {path}: cannot read it ({exc})") from None
    except (UnicodeDecodeError, EOFError) as exc:
        raise ParseError(f"--replay {path}: not an affmon recording ({exc})") from None


class ReplaySource:
    """A recording played back at ``speed`` times the pace it was recorded at. The
    header and the first sample are checked when it opens, so a file that is not a
    recording is a one-line error before anything is drawn; samples are parsed as they
    are played."""

    def __init__(self, path: str, speed: float = 1.0) -> None:
        name = os.path.basename(path)
        lines = read_lines(path)
        header, _ = read_recording(lines[:1], name)
        self.header: Header = header
        self._lines = [line for line in lines[1:] if line.strip()]
        if len(self._lines) < 2:
            raise ParseError(f"{name}: {len(self._lines)} sample(s); a replay needs at least two")
        self._name = name
        self._speed = speed
        self._next_index = 0
        self._pending: Sample | None = self._parse(0)
        self.topology = header.topology
        label = f"replay {name}" + ("" if speed == 1 else f" ×{speed:g}")
        self.info = SourceInfo(header.host or "?", header.nvml, header.interval_s or 1.0, label, len(self._lines))
        self._gap_s = header.interval_s or 1.0

    def _parse(self, index: int) -> Sample:
        try:
            return sample_from_json(json.loads(self._lines[index])["sample"])
        except ParseError as exc:
            raise ParseError(f"{self._name}, line {index + 2}: {exc}") from None
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise ParseError(f"{self._name}, line {index + 2}: bad sample: {exc}") from None

    def next_sample(self) -> Sample | None:
        current = self._pending
        if current is None:
            return None
        self._next_index += 1
        self._pending = self._parse(self._next_index) if self._next_index < len(self._lines) else None
        if self._pending is not None:
            self._gap_s = max(0.0, self._pending.monotonic_s - current.monotonic_s)
        return current

    @property
    def exhausted(self) -> bool:
        return self._pending is None

    def pace_s(self) -> float:
        return self._gap_s / self._speed

    def expected_masks(self) -> Mapping[int, CpuSet]:
        return {}

    def close(self) -> None:
        pass
