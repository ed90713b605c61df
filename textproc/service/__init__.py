"""The processes textproc runs: tokenizer workers (``worker``), the detokenizer process
(``detokenizer_process``) and the supervisor that starts and restarts them (``supervisor``,
``children``).

Service code translates wire frames (``textproc.protocol``) into text-core calls
(``textproc.core``); no wire field reaches the core.
"""
