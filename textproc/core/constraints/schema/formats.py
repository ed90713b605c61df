"""String ``format`` s as regexes over the decoded text (translated into serialised JSON by
``regex.parts.translate_pattern``), each a subset of what its RFC allows and of what
``jsonschema``'s format checker accepts (tested by sampling):

- ``date`` (leap days by the Gregorian rule), ``time``, ``date-time`` (RFC 3339, no leap
  second), ``duration`` (ISO 8601, integer fields);
- ``email`` / ``idn-email`` (a common ASCII subset of RFC 5321), ``hostname`` / ``idn-hostname``
  (ASCII labels of letters and digits with up to two inner hyphens, at most 15 characters
  between hyphens and 5 labels: the 253-character bound holds), ``ipv4``, ``ipv6`` (no
  embedded IPv4, no zone);
- ``uri`` / ``iri``, ``uri-reference`` / ``iri-reference`` (RFC 3986 ASCII: scheme, optional
  authority, path, query, fragment, percent escapes), ``uri-template`` (a URI reference without
  expressions), ``json-pointer``, ``relative-json-pointer``, ``uuid``;
- ``byte`` (OpenAPI: base64 text), ``regex`` (only patterns without groups, classes,
  quantifiers, alternation or escapes: literal text with ``.``, ``^``, ``$``).

Formats not listed (``binary``, ``password``, ``int32``, any vendor name) are annotations and
assert nothing, as JSON Schema says of formats an implementation does not know.
"""

from __future__ import annotations

__all__ = ["FORMATS"]

# years 0001-9999 (a year 0000 is not a date to Python's date.fromisoformat)
_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
_DATE = (_YEAR + r"-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
         r"|02-(?:0[1-9]|1[0-9]|2[0-8]))")
_DATE = rf"(?:{_DATE}|(?:[0-9]{{2}}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)"
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_H = r"[0-9a-fA-F]{1,4}"
_IPV6 = (
    rf"(?:(?:{_H}:){{7}}{_H}|(?:{_H}:){{1,7}}:|(?:{_H}:){{1,6}}:{_H}|(?:{_H}:){{1,5}}(?::{_H}){{1,2}}"
    rf"|(?:{_H}:){{1,4}}(?::{_H}){{1,3}}|(?:{_H}:){{1,3}}(?::{_H}){{1,4}}|(?:{_H}:){{1,2}}(?::{_H}){{1,5}}"
    rf"|{_H}:(?::{_H}){{1,6}}|:(?:(?::{_H}){{1,7}}|:))"
)
_LABEL = r"[a-zA-Z0-9]{1,15}(?:-[a-zA-Z0-9]{1,15}){0,2}"
_HOST = rf"{_LABEL}(?:\.{_LABEL}){{0,4}}"
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|{_PCT})"
_PCHAR_NC = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|{_PCT})"  # no colon (a relative path's first segment)
_QUERY = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_AUTHORITY = rf"//(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|{_PCT})*@)?(?:[A-Za-z0-9\-._~!$&'()*+,;=]|{_PCT})*(?::[0-9]*)?"
_URI = rf"[a-zA-Z][a-zA-Z0-9+.\-]*:(?:{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR}+(?:/{_PCHAR}*)*)?{_QUERY}"
_RELATIVE = rf"(?:{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR_NC}+(?:/{_PCHAR}*)*)?{_QUERY}"
_POINTER = r"(?:/(?:[^~/]|~[01])*)*"
_EMAIL = r"[a-zA-Z0-9!#$%&'*+/=?^_`{|}~.\-]+@[a-zA-Z0-9\-]+(?:\.[a-zA-Z0-9\-]+)*\.[a-zA-Z]{2,}"

FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": _DATE + "[Tt]" + _TIME,
    "duration": (r"P(?:(?:[0-9]+Y(?:[0-9]+M)?(?:[0-9]+D)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)"
                 r"(?:T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?"
                 r"|T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)|[0-9]+W)"),
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "email": _EMAIL,
    "idn-email": _EMAIL,
    "hostname": _HOST,
    "idn-hostname": _HOST,
    "ipv4": rf"{_OCTET}(?:\.{_OCTET}){{3}}",
    "ipv6": _IPV6,
    "uri": _URI,
    "iri": _URI,
    "uri-reference": rf"(?:{_URI}|{_RELATIVE})",
    "iri-reference": rf"(?:{_URI}|{_RELATIVE})",
    "uri-template": rf"(?:{_URI}|{_RELATIVE})",
    "json-pointer": _POINTER,
    # no 0 before another digit (jsonschema's checker reads any such 0 as a leading zero)
    "relative-json-pointer": r"(?:0|[1-9]+0?)(?:#|(?:/(?:[^~/]|~[01])*)*)",
    "byte": r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?",
    # regexes with no group, class, quantifier, alternation or escape: literal text with . ^ $
    "regex": r"[^\\()\[\]{}*+?|]*",
}
