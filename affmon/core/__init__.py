"""The pure core of affmon, by concept, lowest first:

* ``errors``, ``text``: the core's error type; text from other users made safe for a terminal.
* ``model/``: what a machine and its processes are: CPU sets, the topology, samples and the
  rates between two, jobs, the process tree, the placement context, the loop's breakdown.
* ``recording/``: the recording file format (of the model only).
* ``rules/``: what is wrong: the finding and its thresholds, the rules by concept, one
  ``evaluate`` that runs them all, the debouncing tracker and the one tick.
* ``plan/``: what to do about it: the planner, sizing, advice, placements, tuning, audit,
  isolation.
* ``fmt``: numbers as the front ends spell them.

Nothing in this package touches the system or imports textual, psutil, pynvml or plotext;
``tests/project/test_core_purity.py`` proves it, and ``tests/project/test_layers.py`` checks the order above.
Collectors (``affmon.collect``) and the NVML gateway (``affmon.nvml``) produce the values
defined here.
"""
