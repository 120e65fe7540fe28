"""Act: carry a plan out on the runtime (start, stop, prune manifests) and say what happened."""
