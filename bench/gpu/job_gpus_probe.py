"""Check, on a machine with NVIDIA GPUs, that ``affmon exec --from-env`` plans for the GPU
CUDA itself opens for each spelling of ``CUDA_VISIBLE_DEVICES`` (index, full ``GPU-``
UUID, a unique UUID prefix, and a MIG id where MIG is on).

For every GPU NVML lists and every spelling, it runs ``affmon exec --from-env --dry-run``
with ``LOCAL_RANK=0`` and, where torch is installed, asks CUDA (``torch.cuda``) which
PCI bus id device 0 has under the same environment, and prints both side by side. A
line ends in ``ok`` when affmon's GPU is CUDA's (or CUDA could not be asked).

    .venv/bin/python -m bench.gpu.job_gpus_probe

Runs CPU-only too: without NVML it says so and checks nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from affmon.core.model.topology import normalize_bus_id
from affmon.sources.job_gpus import nvml_gpu_refs

CUDA_PROBE = (
    "import torch; p = torch.cuda.get_device_properties(0); "
    "print('%04x:%02x:%02x.0' % (p.pci_domain_id, p.pci_bus_id, p.pci_device_id))"
)


def run(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )
    return (out.stdout + out.stderr).strip()


def main() -> int:
    refs = nvml_gpu_refs()
    if not refs:
        print("no NVML here: nothing to check")
        return 0
    bad = 0
    for ref in refs:
        spellings = [str(ref.index)]
        if ref.uuid:
            spellings += [ref.uuid, ref.uuid[:12]]
        for visible in spellings:
            env = {"CUDA_VISIBLE_DEVICES": visible, "LOCAL_RANK": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
            said = run(env, "-m", "affmon", "exec", "--from-env", "--dry-run", "--", "true")
            found = re.search(r"\(GPU ([0-9a-f:.]+), rank", said)
            ours = found.group(1) if found else None
            cuda = run(env, "-c", CUDA_PROBE)
            cuda_bus = normalize_bus_id(cuda) if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.0", cuda) else None
            verdict = "ok" if cuda_bus is None or cuda_bus == ours else "MISMATCH"
            bad += verdict != "ok"
            print(f"CUDA_VISIBLE_DEVICES={visible:<44} affmon: {ours}  cuda: {cuda_bus or cuda[-60:]}  {verdict}")
            if ours is None:
                print(f"    affmon said: {said}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
