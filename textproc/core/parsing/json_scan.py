"""Incremental JSON validator for one top-level object, fed in chunks.

Owns the character-level JSON grammar (RFC 8259, strict: no control characters inside strings,
no trailing commas, no NaN) used by the tool-call parsers. It never re-reads text it has
already consumed: each ``scan`` call resumes from the saved state, so the work per chunk is
proportional to the chunk. Strings are skipped with a regex run, not character by character.

The scanner reports *events* about the top-level object (keys, the start and the end of each
member value) so a format parser can stream a member's raw text while it is validated; it
does not build values, except the decoded text of strings directly inside the top-level
object (keys and string values), which it captures.
"""

from __future__ import annotations

import json
import re

__all__ = [
    "JsonScanner",
    "NEED_MORE",
    "ERROR",
    "KEY",
    "VALUE",
    "VALUE_END",
    "DONE",
]

# events returned by JsonScanner.scan
NEED_MORE = 0  # the whole chunk was consumed; feed more
ERROR = 1  # the character at pos cannot continue valid JSON
KEY = 2  # a key of the top-level object ended before pos; JsonScanner.string is its text
VALUE = 3  # a top-level member value starts at pos (not consumed yet)
VALUE_END = 4  # a top-level member value ended just before pos (string values: .string)
DONE = 5  # the top-level object closed just before pos

# states
_START = 0
_VALUE = 1
_OBJ_FIRST = 2
_OBJ_KEY = 3
_COLON = 4
_AFTER = 5
_ARR_FIRST = 6
_STR = 7
_ESC = 8
_HEX = 9
_LIT = 10
_NUM_MINUS = 11
_NUM_ZERO = 12
_NUM_INT = 13
_NUM_DOT = 14
_NUM_FRAC = 15
_NUM_E = 16
_NUM_ESIGN = 17
_NUM_EXP = 18
_END = 19

_WS = " \t\n\r"
_DIGITS = "0123456789"
_HEXDIGITS = "0123456789abcdefABCDEF"
_STR_RUN = re.compile(r'[^"\\\x00-\x1f]*')
_WS_RUN = re.compile(r"[ \t\n\r]*")
_DIGIT_RUN = re.compile(r"[0-9]*")
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}

# string roles
_ROLE_PLAIN = 0
_ROLE_KEY = 1  # key of the top-level object (captured)
_ROLE_MEMBER = 2  # string value of a top-level member (captured)


class JsonScanner:
    """Validate one JSON object incrementally and report events about its top-level members.

    ``scan(text, pos)`` consumes ``text`` from ``pos`` and returns ``(event, pos)`` at the
    first event; call it again with the returned ``pos`` (or with the next chunk at 0 after
    ``NEED_MORE``) to continue. After ``ERROR`` the scanner must not be used again.

    >>> s = JsonScanner()
    >>> s.scan('{"a": 1}', 0)
    (2, 4)
    >>> s.string
    'a'
    """

    __slots__ = ("_stack", "_state", "_lit", "_hex", "_role", "_capture", "_announced", "_is_key", "string")

    def __init__(self) -> None:
        self._stack: list[str] = []  # open containers, "{" or "["
        self._state = _START
        self._lit = ""  # rest of a true/false/null literal
        self._hex = 0  # hex digits left in a \\uXXXX escape
        self._role = _ROLE_PLAIN
        self._capture: list[str] = []  # raw text of a captured string
        self._is_key = False  # the open string is an object key
        self._announced = False  # VALUE already reported for the member value about to start
        self.string = ""  # decoded text of the last captured key or member string

    @property
    def depth(self) -> int:
        """Number of open containers (1 while inside the top-level object)."""
        return len(self._stack)

    @property
    def is_done(self) -> bool:
        """True once the top-level object has closed."""
        return self._state == _END

    def scan(self, text: str, pos: int) -> tuple[int, int]:
        """Consume ``text[pos:]`` up to the next event; see the module constants.

        A hot loop kept in one function on purpose: it runs per character of every streamed
        tool call, and a helper call per state would cost more than the state's own work."""
        n = len(text)
        stack = self._stack
        state = self._state
        while pos < n:
            if state == _STR:
                end = _STR_RUN.match(text, pos).end()  # type: ignore[union-attr]
                if self._role != _ROLE_PLAIN and end > pos:
                    self._capture.append(text[pos:end])
                pos = end
                if pos >= n:
                    break
                c = text[pos]
                if c == '"':
                    pos += 1
                    role = self._role
                    self._role = _ROLE_PLAIN
                    if self._is_key:
                        state = _COLON
                        if role == _ROLE_KEY:
                            self.string = _decode(self._capture)
                            self._state = state
                            return KEY, pos
                        continue
                    state = _AFTER
                    if role == _ROLE_MEMBER:
                        self.string = _decode(self._capture)
                        self._state = state
                        return VALUE_END, pos
                    continue
                if c == "\\":
                    if self._role != _ROLE_PLAIN:
                        self._capture.append(c)
                    state = _ESC
                    pos += 1
                    continue
                self._state = state
                return ERROR, pos  # control character inside a string
            c = text[pos]
            if state == _AFTER:
                if c in _WS:
                    pos = _WS_RUN.match(text, pos).end()  # type: ignore[union-attr]
                    continue
                if c == ",":
                    state = _OBJ_KEY if stack[-1] == "{" else _VALUE
                    pos += 1
                    continue
                if (c == "}" and stack[-1] == "{") or (c == "]" and stack[-1] == "["):
                    pos += 1
                    stack.pop()
                    if not stack:
                        self._state = _END
                        return DONE, pos
                    if len(stack) == 1:
                        self._state = _AFTER
                        return VALUE_END, pos
                    continue
                self._state = state
                return ERROR, pos
            if state == _VALUE or state == _ARR_FIRST:
                if c in _WS:
                    pos = _WS_RUN.match(text, pos).end()  # type: ignore[union-attr]
                    continue
                if state == _ARR_FIRST and c == "]":
                    state = _AFTER
                    pos += 1
                    stack.pop()
                    if len(stack) == 1:
                        self._state = state
                        return VALUE_END, pos
                    continue
                if len(stack) == 1 and not self._announced:
                    self._announced = True
                    self._state = _VALUE
                    return VALUE, pos
                self._announced = False
                pos += 1
                if c == "{":
                    stack.append("{")
                    state = _OBJ_FIRST
                elif c == "[":
                    stack.append("[")
                    state = _ARR_FIRST
                elif c == '"':
                    self._role = _ROLE_MEMBER if len(stack) == 1 else _ROLE_PLAIN
                    self._capture = []
                    self._is_key = False
                    state = _STR
                elif c == "-":
                    state = _NUM_MINUS
                elif c == "0":
                    state = _NUM_ZERO
                elif c in _DIGITS:
                    state = _NUM_INT
                elif c in _LITERALS:
                    self._lit = _LITERALS[c]
                    state = _LIT
                else:
                    self._state = state
                    return ERROR, pos - 1
                continue
            if state == _OBJ_FIRST or state == _OBJ_KEY:
                if c in _WS:
                    pos = _WS_RUN.match(text, pos).end()  # type: ignore[union-attr]
                    continue
                if c == '"':
                    self._role = _ROLE_KEY if len(stack) == 1 else _ROLE_PLAIN
                    self._capture = []
                    self._is_key = True
                    state = _STR
                    pos += 1
                    continue
                if c == "}" and state == _OBJ_FIRST:
                    pos += 1
                    stack.pop()
                    state = _AFTER
                    if not stack:
                        self._state = _END
                        return DONE, pos
                    if len(stack) == 1:
                        self._state = state
                        return VALUE_END, pos
                    continue
                self._state = state
                return ERROR, pos
            if state == _COLON:
                if c in _WS:
                    pos = _WS_RUN.match(text, pos).end()  # type: ignore[union-attr]
                    continue
                if c == ":":
                    state = _VALUE
                    pos += 1
                    continue
                self._state = state
                return ERROR, pos
            if state == _ESC:
                if c in '"\\/bfnrt':
                    state = _STR
                elif c == "u":
                    self._hex = 4
                    state = _HEX
                else:
                    self._state = state
                    return ERROR, pos
                if self._role != _ROLE_PLAIN:
                    self._capture.append(c)
                pos += 1
                continue
            if state == _HEX:
                if c not in _HEXDIGITS:
                    self._state = state
                    return ERROR, pos
                if self._role != _ROLE_PLAIN:
                    self._capture.append(c)
                self._hex -= 1
                if self._hex == 0:
                    state = _STR
                pos += 1
                continue
            if state == _LIT:
                if c != self._lit[0]:
                    self._state = state
                    return ERROR, pos
                pos += 1
                self._lit = self._lit[1:]
                if not self._lit:
                    state = _AFTER
                    if len(stack) == 1:
                        self._state = state
                        return VALUE_END, pos
                continue
            if state == _START:
                if c in _WS:
                    pos = _WS_RUN.match(text, pos).end()  # type: ignore[union-attr]
                    continue
                if c == "{":
                    stack.append("{")
                    state = _OBJ_FIRST
                    pos += 1
                    continue
                self._state = state
                return ERROR, pos
            if state == _END:
                self._state = state
                return ERROR, pos
            # numbers
            if state == _NUM_MINUS:
                if c == "0":
                    state = _NUM_ZERO
                elif c in _DIGITS:
                    state = _NUM_INT
                else:
                    self._state = state
                    return ERROR, pos
                pos += 1
                continue
            if state == _NUM_DOT or state == _NUM_ESIGN:
                if c not in _DIGITS:
                    self._state = state
                    return ERROR, pos
                state = _NUM_FRAC if state == _NUM_DOT else _NUM_EXP
                pos += 1
                continue
            if state == _NUM_E:
                if c in "+-":
                    state = _NUM_ESIGN
                elif c in _DIGITS:
                    state = _NUM_EXP
                else:
                    self._state = state
                    return ERROR, pos
                pos += 1
                continue
            # _NUM_ZERO, _NUM_INT, _NUM_FRAC, _NUM_EXP: may end here
            if c in _DIGITS and state != _NUM_ZERO:
                pos = _DIGIT_RUN.match(text, pos).end()  # type: ignore[union-attr]
                continue
            if c == "." and (state == _NUM_ZERO or state == _NUM_INT):
                state = _NUM_DOT
                pos += 1
                continue
            if c in "eE" and state != _NUM_EXP:
                state = _NUM_E
                pos += 1
                continue
            state = _AFTER  # the number ended before c; c is read again as what follows it
            if len(stack) == 1:
                self._state = state
                return VALUE_END, pos
        self._state = state
        return NEED_MORE, pos


def _decode(parts: list[str]) -> str:
    # the parts are a validated JSON string body, so this cannot fail
    value = json.loads('"' + "".join(parts) + '"')
    assert isinstance(value, str)
    return value
