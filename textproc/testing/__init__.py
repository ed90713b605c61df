"""Helpers that the tests and the benchmarks share; the service never imports this package.

``machine`` (what a result was measured on), ``models`` (the fetched vocabularies and the toy
model), ``corpus`` (the mixed corpus and named edge cases), ``schema_corpus`` (the real-world
JSON Schemas and how a compiled schema is judged on them), ``engine`` (an engine that serves
requests one token per step, and textproc's side of the engine sockets), ``bench_cli`` (the
flags every benchmark shares).

A benchmark or a test imports these modules; nothing in ``textproc`` outside this package does.
"""

__all__: list[str] = []
