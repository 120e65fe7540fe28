"""The signals a job may ask for as its checkpoint signal (spec.checkpoint, ``--signal``): the ones
a program can trap, never KILL or STOP. Its own module: ``run``'s parser reads it without pydantic."""

CHECKPOINT_SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM", "CONT", "WINCH", "URG", "PWR")
