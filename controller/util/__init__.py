"""Small helpers with no view of jobs: atomic files, JSON lines, YAML, manifest text edits."""
