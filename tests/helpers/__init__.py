"""Shared test code: every test module imports helpers from here, never from another test module.

``models`` (where the fetched vocabularies live), ``templates`` (real chat templates),
``corpus`` (the parity corpus and named edge cases), ``references`` (the reference
tokenizers), ``stream_vocab`` and ``regex_sampler`` (unit-test builders), ``fuzz``
(hypothesis strategies), ``service`` (the toy model and a running service, through
``textproc.service.launcher``), ``engine_peer`` (a bound engine socket pair), ``chat_cases``
(the concurrent chat mix and its in-process reference).
"""
