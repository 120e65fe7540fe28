"""GPU inventory: what devices exist and who uses them (NVML, or a fake-GPU file)."""
