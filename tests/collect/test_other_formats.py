"""Topology files that are not hwloc XML are refused in one line, never misread."""

import subprocess
import sys
from pathlib import Path

import pytest

from affmon.collect.hwloc_xml import read_hwloc_xml
from affmon.core.errors import ParseError

OTHER = Path(__file__).parent.parent / "fixtures" / "other"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nccl-topo-xml__8xA100-icelake-2socket__aliyun-SimAI.xml", "not hwloc XML (root element <system>)"),
        ("nvsmi-topo__8xH100-2x52c-SMT__ml-engineering.txt", "malformed XML"),
    ],
)
def test_not_hwloc_is_refused(name, message):
    with pytest.raises(ParseError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_hwloc_xml(str(OTHER / name))
    out = subprocess.run(
        [sys.executable, "-m", "affmon", "topology", "--hwloc-xml", str(OTHER / name)], capture_output=True, text=True
    )
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and message in out.stderr
