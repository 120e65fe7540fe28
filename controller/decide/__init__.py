"""Decide: a snapshot and the clock in, a plan out. Pure: no I/O, no clock of its own."""
