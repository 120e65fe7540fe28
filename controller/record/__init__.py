"""Record: gflowd's writes under the state directory: a pass's (``recorder``, ``writer``) and its start-up ones
(``startup``: run/spec-dir, run/web.json, dead temps; ``tighten``: modes an older gflowd left open).
What other rooms still write there, and why, is in docs/design.md ("Who writes under the home")."""
