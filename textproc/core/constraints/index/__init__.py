"""Automaton + vocabulary -> the token index, and its walk.

``vocab`` (:class:`~textproc.core.constraints.index.vocab.TokenVocabulary`: every id's exact
bytes, and the bitset tables derived from them) and ``token_sets`` (token sets kept per
vocabulary across compiles); ``states`` (:class:`StateTokens`: each DFA state's allowed tokens
and where each goes, by the paths that avoid walking tokens one by one: ``counted``, ``shift``,
``regions``, over one ``walks.TokenWalks``, the walks and everything one build keeps across
states; ``parts``: an answer from its parts); ``build`` (the states in reachability order ->
the packed table); ``table`` (:class:`~textproc.core.constraints.index.table.TokenIndex`, what
travels to the engine) and ``guide`` (:class:`~textproc.core.constraints.index.guide.Guide`: one
request's walk). An engine imports ``table`` and ``guide`` only; importing this package loads
none of them.
"""
