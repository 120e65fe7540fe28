"""gflowd: the loop (wake-ups, debounce, resync) around observe -> decide -> act -> record."""
