"""Observe: what is. The spec dir, the GPUs, the host, the processes, as a snapshot; no decisions."""
