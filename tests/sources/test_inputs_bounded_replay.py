"""A recording is bounded where it is read: a live sample is bounded by the kernel, a file
someone sends is not. A process of more than ``MAX_THREADS_PER_PROCESS`` threads, a
sample of more than ``MAX_ROWS_PER_SAMPLE`` rows, or distinct masks holding more than
``MAX_MASK_CPUS_PER_SAMPLE`` CPU ids is one line naming the line of the file; a mask
repeated in every row is parsed and held once; and the largest recording accepted is
replayed in bounded memory."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from affmon.core.errors import ParseError
from affmon.core.recording.format import (
    MAX_MASK_CPUS_PER_SAMPLE,
    MAX_ROWS_PER_SAMPLE,
    MAX_THREADS_PER_PROCESS,
    parse_sample_line,
)
from affmon.sources.stream import ReplaySource
from tests.helpers.recording_cli import affmon, one_line_error

HOGS = Path(__file__).parent.parent / "fixtures" / "recordings" / "hogs.jsonl.gz"


def header() -> str:
    return gzip.decompress(HOGS.read_bytes()).decode().splitlines()[0]  # a 16-CPU VM, one GPU


def process(pid: int, threads: int, mask: str = "0-15", masks: tuple[str, ...] = ()) -> str:
    """A process as ``affmon record`` writes it, with ``threads`` thread rows; the first
    rows take ``masks``, the others ``mask``."""
    rows = ",".join(
        f'[{pid + i},{500 + i},"worker","S",{i % 16},4194624,{1_000_003 * i},{7919 * i},{i},{i},0,{i % 5},'
        f'"{masks[i] if i < len(masks) else mask}"]'
        for i in range(threads)
    )
    return (
        f'{{"pid":{pid},"start_ticks":500,"ppid":1,"name":"python","uid":1000,"user":"u",'
        '"cmdline":"python train.py","mems_allowed":"0","cgroup_cpus":"0-15","gpu_indices":[0],'
        f'"gpu_memory_bytes":1,"watched":true,"training":true,"kernel":false,"threads":[{rows}]}}'
    )


def sample(index: int, *processes: str) -> str:
    return (
        f'{{"sample":{{"monotonic_s":{100 + index},"wall_time_s":{1_795_969_676 + index},"duration_s":0.05,'
        f'"processes":[{",".join(processes)}],"gpus":[]}}}}'
    )


def write(path: Path, *samples: str) -> Path:
    path.write_text("".join(line + "\n" for line in (header(), *samples)))
    return path


def test_a_process_of_more_threads_than_the_bound_is_refused_in_one_line(tmp_path):
    path = write(
        tmp_path / "threads.jsonl",
        sample(0, process(1000, 8)),
        sample(1, process(4242, MAX_THREADS_PER_PROCESS + 1)),
    )
    said = "line 3: process 4242 has 65,537 threads; affmon reads at most 65,536 a process"
    with pytest.raises(ParseError, match=f"^threads.jsonl, {said}$"):
        ReplaySource(str(path))
    assert said in one_line_error(affmon("--replay", str(path)))
    assert said in one_line_error(affmon("audit", "--replay", str(path)))


def test_a_sample_of_more_rows_than_the_bound_is_refused(tmp_path):
    per_process = MAX_ROWS_PER_SAMPLE // 3 + 1  # each within its own bound, not together
    assert per_process <= MAX_THREADS_PER_PROCESS
    line = sample(0, *(process(1000 + 100_000 * k, per_process) for k in range(3)))
    with pytest.raises(
        ParseError, match=r"^r, line 2: 131,076 rows \(processes, threads, GPUs\); affmon reads at most"
    ):
        parse_sample_line(line, "r", 2)


def test_a_mask_repeated_in_every_row_is_parsed_once_and_held_once():
    """A 65,536-CPU set is 3.7 MiB: parsed for each row, 200 rows of it took 748 MiB."""
    got = parse_sample_line(sample(0, process(1000, 1000, mask="0-65535"), process(5000, 10, mask="0-65535")), "r", 2)
    masks = [t.allowed_cpus for p in got.processes for t in p.threads]
    assert len(masks) == 1010 and len(masks[0] or ()) == 65536
    assert all(m is masks[0] for m in masks)


def test_distinct_masks_over_the_bound_are_refused():
    wide = tuple(f"{i}-65535" for i in range(MAX_MASK_CPUS_PER_SAMPLE // 65536 + 1))
    with pytest.raises(ParseError, match=r"^r, line 2: the sample's distinct CPU masks hold more than 262,144"):
        parse_sample_line(sample(0, process(1000, 10, masks=wide)), "r", 2)


PEAK_PROBE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # the old reader dies here
from affmon.sources.stream import ReplaySource
source = ReplaySource(sys.argv[1])
threads = [sum(len(p.threads) for p in s.processes) for s in iter(source.next_sample, None)]
peak_kb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(len(threads), min(threads), peak_kb)
"""


def test_the_largest_recording_accepted_replays_in_bounded_memory(tmp_path):
    """Three samples at every bound: two processes of 65,535 threads (131,072 rows), one
    mask of 65,536 CPUs in every row but a few distinct ones that fill the mask bound."""
    per_process = (MAX_ROWS_PER_SAMPLE - 2) // 2
    distinct = ("0-65534", "1-65535", "0-65500")  # with 0-65535, "0" and 0-15: 262,124 CPU ids
    samples = [
        sample(i, *(process(1000 + 100_000 * k, per_process, "0-65535", distinct) for k in range(2))) for i in range(3)
    ]
    path = write(tmp_path / "largest.jsonl", *samples)
    out = subprocess.run([sys.executable, "-c", PEAK_PROBE, str(path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    played, threads, peak_kb = map(int, out.stdout.split())
    assert (played, threads) == (3, 2 * per_process)
    # Measured: 290 MB (the line's JSON while it is read, and two samples of 131,070
    # threads held for the replay). Parsing each row's 65,536-CPU mask on its own (3.7 MiB
    # a row) passes the 2 GiB address-space limit about 550 rows into the first sample.
    assert peak_kb < 600 * 1024, f"peak RSS {peak_kb // 1024} MB"
