"""Record: the one writer of the state directory (status files, index, node, events)."""
