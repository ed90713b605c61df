"""The pure text core: text in, token ids out, and token ids back to text.

Everything under this package imports only the standard library, ``regex``, ``jinja2``,
``textproc.errors`` and other core modules: no ZeroMQ, msgspec, asyncio, multiprocessing or
environment reads (``tests/unit/test_layering.py`` walks this folder and checks every module).
The process layer (``textproc.service``, ``textproc.http``) builds on it, never the reverse.
"""
