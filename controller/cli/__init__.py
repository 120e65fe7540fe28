"""gflowctl: kubectl-style verbs over the spec and state directories.

Files are the API: the CLI never talks to gflowd directly. Imports are lazy so that
``gflowctl get jobs`` loads neither pydantic nor ruamel.
"""
