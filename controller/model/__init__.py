"""Model: the plain data every phase passes on. Imports nothing of ours (only the schema, for types)."""
