"""What gflowctl's writing verbs and the Python client share: ``manifests`` (apply: read, check,
store a manifest keeping the user's text), ``edit`` (cancel, suspend, priority, set, patch: a
locked re-read and rewrite), ``submit`` (run's I/O: a script or command to a stored manifest) and
``precheck`` (run's look at the program before it is queued). The spec dir is the only place
they write, and only through ``util/fsutil.py``'s locked, atomic rewrites.
"""
