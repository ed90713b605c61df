"""Numbers: ``minimum`` / ``maximum`` / ``exclusive*`` and ``multipleOf`` as regexes.

Owns :func:`number_regex`. Integers are written ``-?(0|[1-9][0-9]*)``; bounded non-integers as
``-?I.F`` without an exponent (a subset: ``1e-05`` is a number in range that bounded schemas
do not produce), compared digit by digit with the decimal bounds, so ``0.1`` and ``3.0`` are
exact. ``multipleOf``: integer steps that divide a power of ten up to 1,000 (the last digits
decide), any integer step on a range of at most 256 multiples (listed), decimal steps
``10^-k`` (at most k fraction digits); others are refused.
"""

from __future__ import annotations

import math
from decimal import Decimal

from textproc.core.constraints.regex.parts import group, int_range, lit
from textproc.errors import InvalidInput

__all__ = ["number_regex", "INTEGER", "NUMBER"]

INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
Bound = tuple[Decimal, bool]  # (value, exclusive)
_MAX_LISTED = 256


def number_regex(
    integer: bool, lo: Bound | None, hi: Bound | None, steps: list[Decimal], path: str
) -> str | None:
    """Regex of the numbers (integers only when ``integer``) in the bounds that are multiples
    of every step; None when there is none."""
    int_step = 1
    frac_digits: int | None = None
    for step in steps:
        if step == step.to_integral_value():
            int_step = int_step * int(step) // math.gcd(int_step, int(step))
            integer = True
        elif step == Decimal(1).scaleb(step.adjusted()) and not integer:
            digits = -step.adjusted()
            frac_digits = digits if frac_digits is None else max(frac_digits, digits)
        elif integer and (Decimal(1) / step) == (Decimal(1) / step).to_integral_value():
            continue  # 1 / step is an integer: every integer is a multiple
        else:
            raise InvalidInput(f"multipleOf {step} at {path}.multipleOf: only integers, 10^-k, or "
                               f"1/n on integers are enforced")
    if integer:
        return _integers(lo, hi, int_step, path)
    if lo is None and hi is None and frac_digits is None:
        return NUMBER
    return _decimals(lo, hi, frac_digits)


def _integers(lo: Bound | None, hi: Bound | None, step: int, path: str) -> str | None:
    a = None if lo is None else (math.floor(lo[0]) + 1 if lo[1] else math.ceil(lo[0]))
    b = None if hi is None else (math.ceil(hi[0]) - 1 if hi[1] else math.floor(hi[0]))
    if a is not None and b is not None and a > b:
        return None
    if step == 1:
        return INTEGER if a is None and b is None else group(int_range(a, b))
    if a is not None and b is not None and (b - a) // step <= _MAX_LISTED:
        first = -(-a // step) * step
        values = list(range(first, b + 1, step))
        return group([str(v) for v in values]) if values else None
    if a is not None or b is not None or 1000 % step:
        raise InvalidInput(f"multipleOf {step} at {path}.multipleOf is enforced on integers only for steps "
                           f"dividing 1000, or ranges of at most {_MAX_LISTED} multiples")
    n = next(k for k in range(4) if (10**k) % step == 0)
    small = [str(v) for v in range(step, 10**n, step)]
    tails = group([str(r).zfill(n) for r in range(0, 10**n, step)])
    return f"-?(?:0|{group(small + [f'[1-9][0-9]*{tails}'])})" if small else f"-?(?:0|[1-9][0-9]*{tails})"


def _decimals(lo: Bound | None, hi: Bound | None, frac: int | None) -> str | None:
    alternatives = []
    if hi is None or hi[0] > 0 or (hi[0] == 0 and not hi[1]):
        # the non-negative part, [max(lo, 0), hi]
        low: Bound = (Decimal(0), False) if lo is None or lo[0] < 0 else lo
        part = _magnitudes(low, hi, frac)
        if part is not None:
            alternatives.append(part)
    if lo is None or lo[0] < 0:
        # negative numbers -m: m in (max(-hi, 0), -lo], written without "-0"
        low = (Decimal(0), True) if hi is None or hi[0] >= 0 else (-hi[0], hi[1])
        part = _magnitudes(low, None if lo is None else (-lo[0], lo[1]), frac)
        if part is not None:
            alternatives.append("-" + part)
    return group(alternatives) if alternatives else None


def _magnitudes(lo: Bound, hi: Bound | None, frac: int | None) -> str | None:
    """Regex of the canonical non-negative decimals ``I(.F)?`` in [lo, hi]."""
    if hi is not None and (lo[0] > hi[0] or (lo[0] == hi[0] and (lo[1] or hi[1]))):
        return None
    a = int(math.floor(lo[0]))
    fa = _frac_digits(lo[0] - a)
    if hi is None:
        head = _fraction(fa, lo[1], None, False, frac)
        out = [] if head is None else [lit(str(a)) + head]
        any_fraction = _fraction("", False, None, False, frac) or ""
        out.extend(r + any_fraction for r in int_range(a + 1, None))
        return group(out)
    b = int(math.floor(hi[0]))
    fb = _frac_digits(hi[0] - b)
    if a == b:
        tail = _fraction(fa, lo[1], fb, hi[1], frac)
        return None if tail is None else lit(str(a)) + tail
    out = []
    first = _fraction(fa, lo[1], None, False, frac)
    if first is not None:
        out.append(lit(str(a)) + first)
    if b - a >= 2:
        any_fraction = _fraction("", False, None, False, frac) or ""
        out.extend(r + any_fraction for r in int_range(a + 1, b - 1))
    last = _fraction("", False, fb, hi[1], frac)
    if last is not None:
        out.append(lit(str(b)) + last)
    return group(out) if out else None


def _frac_digits(f: Decimal) -> str:
    if f == 0:
        return ""
    text = format(f, "f")
    return text.split(".", 1)[1].rstrip("0")


def _fraction(lo: str, lo_ex: bool, hi: str | None, hi_ex: bool, limit: int | None) -> str | None:
    """The optional ``.F`` after an integer part: 0.F within [0.lo, 0.hi] (hi None: below 1)."""
    end, rest = _digits(0, lo, lo_ex, True, hi or "", hi_ex, hi is not None, limit)
    if not rest:
        return "" if end else None
    tail = r"\." + group(rest)
    return f"(?:{tail})?" if end else tail


def _digits(i: int, lo: str, lo_ex: bool, tl: bool, hi: str, hi_ex: bool, tu: bool,
            limit: int | None) -> tuple[bool, list[str]]:
    """(F may end at position ``i``, alternatives for one or more further digits), given
    whether the digits so far equal the lower (``tl``) / upper (``tu``) bound's; the bounds'
    digit strings have no trailing zeros."""
    end = (not tl or (not lo[i:] and not lo_ex)) and (not tu or bool(hi[i:]) or not hi_ex)
    room = None if limit is None else limit - i
    if room == 0:
        return end, []
    free = "[0-9]+" if room is None else f"[0-9]{{1,{room}}}"
    if tl and not lo[i:] and not tu:
        if not lo_ex:
            return end, [free]
        return end, ["[0-9]*[1-9][0-9]*" if room is None else f"[0-9]{{0,{room - 1}}}[1-9]"]
    if tu and not hi[i:]:
        if tl and lo[i:] or hi_ex or (tl and lo_ex):
            return end, []
        return end, ["0+" if room is None else f"0{{1,{room}}}"]
    if not tl and not tu:
        return end, [free]
    lo_d = int(lo[i]) if tl and i < len(lo) else 0
    hi_d = int(hi[i]) if tu else 9
    out: list[str] = []
    loose: list[int] = []
    for d in range(lo_d, hi_d + 1):
        ntl, ntu = tl and d == lo_d, tu and d == hi_d
        if not ntl and not ntu:
            loose.append(d)
            continue
        sub_end, sub = _digits(i + 1, lo, lo_ex, ntl, hi, hi_ex, ntu, limit)
        if sub:
            out.append(str(d) + (f"(?:{group(sub)})?" if sub_end else group(sub)))
        elif sub_end:
            out.append(str(d))
    if loose:
        cls = str(loose[0]) if len(loose) == 1 else f"[{loose[0]}-{loose[-1]}]"
        out.append(cls + ("[0-9]*" if room is None else f"[0-9]{{0,{room - 1}}}"))
    return end, out
