"""The API: manifest and status models (pydantic v2), quantities and durations.

The models are the one place the schema lives: admission validates with them, ``crd-schemas/``
and ``gflowctl explain`` are generated from them.
"""
