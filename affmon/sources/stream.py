"""A stream of samples for a front end that loops: this machine (``LiveSource``) or a
recording (``ReplaySource``). Both are driven by the caller, one call per tick, from one
thread at a time; neither touches a UI.

A source gives the topology and the header's facts (``info``), the next ``Sample``, how
long to wait before the one after (``pace_s``), and the masks affmon itself pinned (for
the AFFINITY_DRIFT rule).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from affmon.core.errors import AffmonError, ParseError, SourceError
from affmon.core.model.samples import Sample
from affmon.core.model.topology import Topology
from affmon.core.recording.lines import split_lines
from affmon.core.rules.base import ExpectedMasks

if TYPE_CHECKING:
    from affmon.core.recording.format import Header


@dataclass(frozen=True)
class SourceInfo:
    """What the header says about where the samples come from."""

    host: str
    nvml_status: str | None
    interval_s: float
    replay: str | None = None  # what a replay plays ("hogs.jsonl.gz ×2"); None: live
    total_samples: int | None = None  # a replay's length
    notice: str | None = None  # e.g. /proc hides other users' processes (hidepid)

    @property
    def live(self) -> bool:
        """Whether the samples are read from this machine now (not played from a file)."""
        return self.replay is None

    @property
    def source(self) -> str:
        """Where the samples come from, as the header says it."""
        return "live" if self.replay is None else f"replay {self.replay}"


class Source(Protocol):
    topology: Topology
    info: SourceInfo
    read_started_s: float  # time.monotonic() when the newest sample's reading started

    @property
    def live(self) -> bool:
        """Whether it reads this machine now: a live source's first sample can be read ahead
        and drawn alone, its errors are tried again next interval; a replay's are not."""
        ...

    def read_ahead(self) -> None:
        """Start reading the first sample while the caller starts (a replay: nothing to do)."""
        ...

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

    def expected_masks(self) -> ExpectedMasks: ...

    def close(self) -> None: ...


def _no_masks() -> ExpectedMasks:
    return {}


class _Ahead:
    """A sample read on another thread, or what its reading raised: ``concurrent.futures``'
    ``Future`` for one value, without its import (and ``logging``'s) before the first frame."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._sample: Sample | None = None
        self._error: BaseException | None = None

    def set_result(self, sample: Sample) -> None:
        self._sample = sample
        self._done.set()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._done.set()

    def result(self) -> Sample:
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._sample is not None
        return self._sample


class LiveSource:
    """Every process on this machine (training ones watched, or ``pids`` and their
    descendants), every thread of them, NVML when there is one, and the loop probe of
    each rank and each of ``pids`` (``loops``). ``expected_masks``: the pins in force (the
    caller hands in the journal's reader; none by default)."""

    def __init__(
        self,
        pids: tuple[int, ...] = (),
        interval_s: float = 1.0,
        root: str = "/",
        *,
        expected_masks: Callable[[], ExpectedMasks] = _no_masks,
        loops: bool = True,
    ) -> None:
        from affmon.collect.sampler import Selection
        from affmon.sources.live import open_live_sources

        self._sources = open_live_sources(Selection(pids=pids, others=True), root, loops=loops)
        self.topology = self._sources.topology
        self.sampler = self._sources.sampler
        self.interval_s = interval_s
        self.info = SourceInfo(self._sources.host, self._sources.nvml_status, interval_s, notice=self._sources.notice)
        self._pinned = expected_masks
        self._ahead: _Ahead | None = None
        self.read_started_s = 0.0  # time.monotonic() when the newest sample's reading started

    @property
    def live(self) -> bool:
        return True

    def read_ahead(self) -> None:
        """Start reading the next sample now, on a thread of its own; ``next_sample``
        returns it. The monitor starts its first read so, before it loads Textual, so that
        the first view does not wait for a read that only began once the screen was up."""
        if self._ahead is not None:
            return
        ahead = _Ahead()
        self._ahead = ahead
        self.read_started_s = time.monotonic()

        def read() -> None:
            try:
                ahead.set_result(self._sources.sample())
            except BaseException as exc:  # raised again by next_sample, as if it had read it itself
                ahead.set_exception(exc)

        threading.Thread(target=read, name="affmon-read-ahead", daemon=True).start()

    def first_sample(self) -> Sample:
        """The sample read ahead (started now if it was not), waited for; ``next_sample``
        still returns it. Raises what its reading raised."""
        self.read_ahead()
        assert self._ahead is not None
        return self._ahead.result()

    def next_sample(self) -> Sample:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            return ahead.result()
        self.read_started_s = time.monotonic()
        return self._sources.sample()

    @property
    def exhausted(self) -> bool:
        return False

    def pace_s(self) -> float:
        return self.interval_s

    def expected_masks(self) -> ExpectedMasks:
        return self._pinned()  # re-reads the journal only when it changed

    def close(self) -> None:
        self._sources.close()


CHUNK_BYTES = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"


def read_lines(path: str, name: str | None = None) -> Generator[tuple[int, str], None, None]:
    """The numbered, non-blank lines of a recording, gzip or plain (told apart by the
    gzip magic bytes, so a FIFO works too), read a chunk at a time: memory holds one line
    (at most ``MAX_LINE_BYTES``), whatever the file holds. A gzip stream that ends early
    (a recording still being written, or one whose recorder was killed) ends the lines
    there; a corrupt one is a ``ParseError``."""
    import gzip  # replays only: the live monitor's first frame does not wait for it

    name = name or os.path.basename(path)
    try:
        with open(path, "rb") as raw:
            stream: io.BufferedIOBase = raw
            if raw.peek(2)[:2] == GZIP_MAGIC:
                stream = gzip.GzipFile(fileobj=raw, mode="rb")
            yield from split_lines(_chunks(stream), name)
    except FileNotFoundError:
        raise SourceError(f"--replay {path}: no such file") from None
    except IsADirectoryError:
        raise SourceError(f"--replay {path}: is a directory, not a recording") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise ParseError(f"--replay {path}: cannot read it (corrupt gzip data: {exc})") from None
    except OSError as exc:
        raise SourceError(f"--replay {path}: cannot read it ({exc.strerror or exc})") from None


def _chunks(stream: io.BufferedIOBase) -> Iterator[bytes]:
    while True:
        try:
            # read1: one read of the file per call, so the data decoded before a gzip
            # stream's early end is returned, not lost with the EOFError.
            chunk = stream.read1(CHUNK_BYTES)
        except EOFError:  # gzip: the stream ends before its end marker
            return
        if not chunk:
            return
        yield chunk


class ReplaySource:
    """A recording played back at ``speed`` times the pace it was recorded at, read as it
    is played (one line in memory at a time). When it opens, the header and the first two
    samples are checked, and a regular file is read through once to count its samples
    and check its framing (compression, line lengths, UTF-8), so such faults are one line
    before anything is drawn. A later sample that is malformed, has an implausible wall
    time or does not come after the one before (``check_replay_order``) is refused when
    it is reached, naming its line; the samples before it are played."""

    def __init__(self, path: str, speed: float = 1.0) -> None:
        from affmon.core.recording.format import read_recording

        name = os.path.basename(path)
        self._name = name
        self._speed = speed
        self._lines = read_lines(path, name)
        try:
            first = next(self._lines, None)
            header, _ = read_recording([] if first is None else [first[1]], name)
            total = None
            if os.path.isfile(path):  # a FIFO cannot be read twice
                total = sum(1 for _ in read_lines(path, name)) - 1
                if total < 2:
                    raise ParseError(f"{name}: {total} sample(s); a replay needs at least two")
            self._remaining = total  # samples left to read, where counted (a file still growing stops there)
            self._ahead: deque[Sample] = deque()  # read, not yet played
            self._error: AffmonError | None = None
            self._last: Sample | None = None  # the last sample read
            for _ in range(2):
                sample = self._read()
                if sample is None:
                    raise ParseError(f"{name}: {len(self._ahead)} sample(s); a replay needs at least two")
                self._ahead.append(sample)
        except BaseException:
            self.close()
            raise
        self.header: Header = header
        self.topology = header.topology
        interval_s = header.interval_s or 1.0
        label = name + ("" if speed == 1 else f" ×{speed:g}")
        self.info = SourceInfo(header.host or "?", header.nvml, interval_s, label, total)
        self.read_started_s = 0.0
        # A gap between two samples is played as a wait; one far longer than the recorded
        # interval (a stalled recorder, a hand-edited clock) is cut short, never a hang.
        self._max_gap_s = min(max(10 * interval_s, 1.0), 3600.0)
        self._gap_s = min(interval_s, self._max_gap_s)

    def _read(self) -> Sample | None:
        """The next sample in the file, checked against the one before it; None at the end."""
        if self._remaining == 0:
            return None
        line = next(self._lines, None)
        if line is None:
            return None
        number, text = line
        from affmon.core.recording.format import check_replay_order, parse_sample_line

        sample = parse_sample_line(text, self._name, number)
        check_replay_order(sample, self._last, self._name, number)
        if self._remaining is not None:
            self._remaining -= 1
        self._last = sample
        return sample

    @property
    def live(self) -> bool:
        return False

    def read_ahead(self) -> None:
        return None  # its first samples were read when it opened

    def next_sample(self) -> Sample | None:
        self.read_started_s = time.monotonic()
        if not self._ahead:
            if self._error is not None:
                raise self._error  # the bad line stays bad: each later call says so again
            return None
        current = self._ahead.popleft()
        if not self._ahead and self._error is None:
            try:
                following = self._read()
            except AffmonError as exc:
                self._error = exc
            else:
                if following is not None:
                    self._ahead.append(following)
        if self._ahead:
            self._gap_s = min(self._ahead[0].monotonic_s - current.monotonic_s, self._max_gap_s)
        return current

    @property
    def exhausted(self) -> bool:
        """True once the last good sample was played (a refused line is still to be told)."""
        return not self._ahead and self._error is None

    def pace_s(self) -> float:
        return self._gap_s / self._speed

    def expected_masks(self) -> ExpectedMasks:
        return {}

    def close(self) -> None:
        # ValueError: being read in the sampler thread right now; closed when collected.
        with contextlib.suppress(ValueError):
            self._lines.close()  # closes the file
