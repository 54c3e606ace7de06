"""Tests of affmon.nvml, the one NVML gateway, against a fake pynvml and a real GPU where there is one."""
