"""JSON Schema -> regex, the first stage of a structured-output constraint.

``to_regex`` (:func:`json_schema_to_regex`, the entry) resolves and merges a schema into flat
conjunctions (``flat``: ``$ref``, ``allOf`` / ``anyOf`` / ``oneOf``; ``merge``: one schema
object into a flat; ``nodes``: the values they pass), and ``emit`` writes each flat as regex
text, with ``numbers`` (bounds, ``multipleOf``) and ``formats`` (string ``format`` s). The regex
goes on to :mod:`textproc.core.constraints.regex`. Importing this package loads none of them.
"""
