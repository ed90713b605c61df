"""What a tool call or a reasoning block adds around a request's constraint: ``forced_calls``
(``tool_choice`` required / named: the format's own call spelling as a regex), ``strict_calls``
(free text whose calls are declared tools with valid arguments) over ``free_text`` (text without
given markers), and ``reasoning_budget`` (the index states inside a reasoning block, for the
guide that counts a budget; run by the engine). Importing this package loads none of them: the
engine imports ``reasoning_budget`` alone.
"""
