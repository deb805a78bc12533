"""Kernel launches and replayed runs: launches without numba's per-call work
(launch; one cuLaunchKernel on a prebuilt argument block: driver_launch), the
device work a run queues, noted while it is recorded (recording), a run made
again as its recorded driver calls (replay; one recorded run: replay_trace),
and those calls as CUDA graphs (graph)."""
