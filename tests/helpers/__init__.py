"""Shared test code: every test module imports helpers from here or from ``textproc.testing``
(what the tests share with the benchmarks: the corpus and named edge cases, the schema corpus,
the vocabularies and the toy model, ``EnginePeer``), never from another test module.

``models`` (skip when a fetched vocabulary is missing), ``templates`` (real chat templates),
``references`` (the reference tokenizers), ``stream_vocab`` and ``regex_sampler`` (unit-test
builders), ``fuzz`` (hypothesis strategies), ``service`` (a running service, through
``textproc.service.launcher``), ``engine_peer`` (frames seen from textproc's side of the engine
sockets), ``chat_cases`` (the concurrent chat mix and its in-process reference).
"""
