"""Automaton + vocabulary -> the token index, and its walk.

``vocab`` (:class:`~textproc.core.constraints.index.vocab.TokenVocabulary`: every id's exact
bytes, and the bitset tables derived from them) and ``token_sets`` (token sets kept per
vocabulary across compiles); ``states`` (each DFA state's allowed tokens and where each goes,
with the paths that avoid walking tokens one by one: ``chains``, ``near``, ``parts``,
``counted``, ``shift``, ``replay``, ``regions``); ``build`` (the states in reachability order ->
the packed table); ``table`` (:class:`~textproc.core.constraints.index.table.TokenIndex`, what
travels to the engine) and ``guide`` (:class:`~textproc.core.constraints.index.guide.Guide`: one
request's walk). An engine imports ``table`` and ``guide`` only; importing this package loads
none of them.
"""
