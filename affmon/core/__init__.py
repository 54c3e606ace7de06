"""The pure core of affmon.

Value types, CPU-set arithmetic, rates from two samples and report shaping. Nothing
in this package touches the system or imports textual, psutil, pynvml or plotext;
``tests/test_core_purity.py`` proves it. Collectors (``affmon.collect``) and the
NVML gateway (``affmon.nvml``) produce the values defined here.
"""
