"""Where samples come from and go: the live machine (``live``: topology, NVML and a sampler
over them), a stream of samples for a front end that loops (``stream``: live or a replayed
recording), and the file a recording is written to (``record``). Every front end (the
monitor, the exporter, the commands) takes its samples from here."""
