"""What the fake model says: per-request token sources for the echo, replay and random modes.

Owns the generation rules every mode shares (``RequestState.take``): a stop token id (the
request's ``stop_token_ids``: textproc put the model's EOS ids there unless ``ignore_eos``) ends
the request with "stop" once ``min_tokens`` tokens were generated before it, and is then the
LAST id of the request's output (so it counts as a completion token, as in vLLM/OpenAI usage);
before ``min_tokens`` a stop id or an EOS id (``eos_token_ids``, with ``ignore_eos`` too) is
skipped, as an engine that masks them (vLLM's ``all_stop_token_ids``) would never sample it;
``max_tokens`` generated ends it with "length" (a stop id in that same position wins). Echo and
replay scripts end with the end token and repeat when it does not stop the request
(``ignore_eos``, ``min_tokens``).

Constrained requests (``IncomingRequest.guide``, a compiled index from textproc) always give
an output the constraint accepts: random mode draws uniformly among the allowed ids (rejection
sampling over the id range, then the allowed list when few are allowed); echo and replay
follow their script while each id is allowed and continue with the constrained random walk
from the first id that is not. In an accepting state an end id is taken with probability 1/2,
and an id is taken only if the shortest completion after it (``completion_length``) still fits
in ``max_tokens``. The end id ends it with "stop". A partial index (the first states of a
progressive compile: ``guide.ready`` False past them) holds the request, no id taken, until the
whole index arrives; on it the walk draws among the allowed ids while more than ``_FREE_LEFT``
tokens are left (no shortest completions yet) and holds below that.

Logprobs (``IncomingRequest.logprobs`` = k, ``RequestState.logprob_rows``): echo and replay give
each token a deterministic pseudo-random logprob in (-5, 0] from (token id, position) and k
alternatives (the token itself first, then other ids of the vocabulary, each less likely);
random mode gives the true value of its uniform draw, ``-log(number of ids it draws from)``
(the allowed ids of the state when constrained), and k alternatives with that same value.

Imports nothing from textproc but a tokenizer passed in (anything with the ``TokenizerLike``
methods): exactly what a real engine would have.
"""

from __future__ import annotations

import math
import random
from typing import Any, Protocol, Sequence

_FREE_LEFT = 64  # tokens left above which a walk on a partial index may go on unsteered

__all__ = [
    "TokenizerLike",
    "RequestState",
    "echo_answer",
    "ScriptMaker",
    "EchoScripts",
    "ReplayScripts",
    "RandomScripts",
    "biased_pool",
    "LogprobRow",
]

# one generated token's logprobs: (its logprob, [(alternative id, logprob), ...] most likely first)
LogprobRow = tuple[float, list[tuple[int, float]]]


class TokenizerLike(Protocol):
    eos_token_id: int | None
    special_ids: frozenset[int]
    vocab_size: int

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str: ...


class _RequestLike(Protocol):
    request_id: str
    prompt_token_ids: Sequence[int]
    max_tokens: int
    stop_token_ids: list[int]
    min_tokens: int
    ignore_eos: bool


_CHATML_USER = "<|im_start|>user\n"
_CHATML_END = "<|im_end|>"
_INST_OPEN = "[INST]"
_INST_CLOSE = "[/INST]"


def echo_answer(prompt_text: str) -> str | None:
    """The text of the last user message of a ChatML (or ``[INST]``) prompt; None if neither.

    >>> echo_answer("<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n")
    'hi'
    """
    start = prompt_text.rfind(_CHATML_USER)
    if start >= 0:
        start += len(_CHATML_USER)
        end = prompt_text.find(_CHATML_END, start)
        return prompt_text[start:] if end < 0 else prompt_text[start:end]
    if "<|im_start|>" in prompt_text:
        return ""  # ChatML without a user turn: answer nothing, then the end token
    start = prompt_text.rfind(_INST_OPEN)
    if start >= 0:
        start += len(_INST_OPEN)
        end = prompt_text.find(_INST_CLOSE, start)
        return (prompt_text[start:] if end < 0 else prompt_text[start:end]).strip()
    return None


class RequestState:
    """One running request: where it is in its token source and how many tokens it made."""

    __slots__ = (
        "request_id", "script", "pos", "rng", "pool", "generated", "max_tokens", "stops",
        "min_tokens", "masked", "only_masked", "aborted_at", "guide", "echoing", "logprobs",
        "vocab_size", "fast_forwarded",
        "_allowed",
    )

    def __init__(
        self,
        request: _RequestLike,
        script: list[int] | None,
        *,
        rng: random.Random | None = None,
        pool: Sequence[int] = (),
    ) -> None:
        self.request_id = request.request_id
        self.script = script  # cyclic token source (echo / replay); None for random
        self.pos = 0
        self.rng = rng
        self.pool = pool  # ids random mode draws from
        self.generated = 0
        self.max_tokens = request.max_tokens
        self.stops = set(request.stop_token_ids)
        # masked until min_tokens (request-like test objects may lack eos_token_ids)
        self.masked = self.stops | set(getattr(request, "eos_token_ids", ()))
        self.min_tokens = request.min_tokens
        self.only_masked = script is not None and all(t in self.masked for t in script)
        self.guide: Any = None  # textproc.core.constraints.Guide for a constrained request
        self.fast_forwarded = 0  # ids appended without sampling: the guide's only choice (forced_ids)
        self.echoing = script is not None
        # alternatives per token the request wants (None: no logprobs; protocol 8)
        self.logprobs: int | None = getattr(request, "logprobs", None)
        self.vocab_size = 0  # echo / replay: the vocabulary alternatives are drawn from
        self._allowed: list[list[int]] = []  # constrained + logprobs: allowed ids per new token

    def constrain(self, guide: Any, rng: random.Random) -> None:
        """Follow ``guide`` from now on (see the module docstring)."""
        self.guide = guide
        if self.rng is None:
            self.rng = rng

    def _next(self) -> int:
        script = self.script
        if script is None:
            assert self.rng is not None
            return self.pool[self.rng.randrange(len(self.pool))]
        token_id = script[self.pos]
        self.pos = (self.pos + 1) % len(script)
        return token_id

    def _next_guided(self) -> int:
        guide = self.guide
        index = guide.index
        state = guide.state
        left = self.max_tokens - self.generated - 1  # tokens left after this one
        # a partial index knows no completions yet: unsteered (held near the end, _take_guided)
        length = index.completion_length if not index.partial else (lambda _: 0)

        def fits(token_id: int) -> bool:  # allowed, and the output can still end in time
            nxt = index.next_state(state, token_id)
            return nxt >= 0 and (token_id in guide.end_set or length(nxt) + 1 <= left)

        script = self.script
        if self.echoing and script is not None:
            token_id = script[self.pos]
            if fits(token_id):
                self.pos = (self.pos + 1) % len(script)
                return token_id
            self.echoing = False
        rng = self.rng
        assert rng is not None
        if guide.is_accepting and (rng.random() < 0.5 or left < 1):
            return index.end_ids[0]  # type: ignore[no-any-return]
        size = index.vocab_size
        for _ in range(32):
            token_id = rng.randrange(size)
            if fits(token_id):
                return token_id
        fitting = [t for t in guide.allowed_ids() if fits(t)]
        if fitting:
            return rng.choice(fitting)  # type: ignore[no-any-return]
        steer = guide.completion_token()
        return steer if steer >= 0 else rng.choice(guide.allowed_ids())  # type: ignore[no-any-return]

    def _take_guided(self, k: int) -> tuple[list[int], str | None]:
        new: list[int] = []
        guide = self.guide
        if self.logprobs is not None:
            self._allowed = []
        forced: list[int] = []
        while len(new) < k:
            if not guide.ready or (guide.index.partial and self.max_tokens - self.generated <= _FREE_LEFT):
                return new, None  # held until the whole index arrives
            if not forced:
                # fast-forward: ids that are the only choice are appended without sampling
                forced = guide.forced_ids(k - len(new))
                forced.reverse()
            if forced:
                token_id = forced.pop()
                self.fast_forwarded += 1
                script = self.script
                if self.echoing and script is not None:
                    if script[self.pos] == token_id:
                        self.pos = (self.pos + 1) % len(script)
                    else:
                        self.echoing = False
            else:
                token_id = self._next_guided()
            if self.logprobs is not None:
                self._allowed.append(guide.allowed_ids())
            guide.advance(token_id)
            new.append(token_id)
            self.generated += 1
            if guide.ended:
                return new, "stop"
            if self.generated >= self.max_tokens:
                return new, "length"
        return new, None

    def take(self, k: int) -> tuple[list[int], str | None]:
        """Up to ``k`` new ids and the finish reason ("stop", "length") if this ends it."""
        if self.guide is not None:
            return self._take_guided(k)
        new: list[int] = []
        stops = self.stops
        skipped = 0
        while len(new) < k:
            token_id = self._next()
            if self.generated < self.min_tokens and token_id in self.masked:
                if not self.only_masked and skipped < 1000:
                    skipped += 1
                    continue  # masked until min_tokens
            elif token_id in stops:
                new.append(token_id)
                self.generated += 1
                return new, "stop"
            new.append(token_id)
            self.generated += 1
            if self.generated >= self.max_tokens:
                return new, "length"
        return new, None


    def logprob_rows(self, new_ids: Sequence[int], first: int) -> list[LogprobRow]:
        """The logprobs of ``new_ids`` (the last :meth:`take`), the first of them being output
        token number ``first``; ``logprobs`` alternatives each (see the module docstring)."""
        k = self.logprobs or 0
        rows: list[LogprobRow] = []
        if self.script is None or self._allowed:
            pool: Sequence[int] = self.pool
            for j, token_id in enumerate(new_ids):
                if j < len(self._allowed):
                    pool = self._allowed[j]
                value = -math.log(len(pool)) if len(pool) > 1 else 0.0
                alts = [(pool[(token_id * 31 + i) % len(pool)], value) for i in range(k)]
                rows.append((value, alts))
            return rows
        vocab = max(1, self.vocab_size)
        for j, token_id in enumerate(new_ids):
            x = (token_id * 2654435761 + (first + j) * 40503) & 0xFFFFFFFF
            value = -(x % 1000) / 200.0
            alts = [(token_id, value)] + [((token_id + 7919 * i) % vocab, value - 0.5 * i)
                                          for i in range(1, k)]
            rows.append((value, alts[:k]))
        return rows


class ScriptMaker(Protocol):
    def __call__(self, request: _RequestLike) -> RequestState: ...


def _end_token(tok: TokenizerLike, request: _RequestLike) -> int | None:
    """EOS if it stops this request, else the first stop id; plain EOS under ignore_eos."""
    eos = tok.eos_token_id
    if request.ignore_eos or (eos is not None and eos in request.stop_token_ids):
        return eos
    if request.stop_token_ids:
        return request.stop_token_ids[0]
    return eos


class EchoScripts:
    """Echo mode: answer with the last user message (ChatML / [INST]) or the whole prompt."""

    def __init__(self, tok: TokenizerLike) -> None:
        self.tok = tok
        # the tokenizer's decode and encode tables now, not in the first request's step
        # (0.3-0.5 s on Qwen3: the first echo of a fresh service waited for them)
        tok.encode(tok.decode([0], skip_special_tokens=False) + " Hello, world")

    def __call__(self, request: _RequestLike) -> RequestState:
        ids = request.prompt_token_ids
        answer = echo_answer(self.tok.decode(ids, skip_special_tokens=False))
        if answer is None:  # a completion prompt: echo it all (without BOS and the like)
            answer = self.tok.decode(ids, skip_special_tokens=True)
        script = self.tok.encode(answer) if answer else []
        end = _end_token(self.tok, request)
        if end is not None:
            script.append(end)
        if not script:  # nothing to say and no end token: repeat the prompt's last id
            script = [ids[-1]]
        state = RequestState(request, script)
        state.vocab_size = self.tok.vocab_size
        return state


class ReplayScripts:
    """Replay mode: every request answers with the tokens of one text file, then the end token."""

    def __init__(self, tok: TokenizerLike, text: str) -> None:
        self.tok = tok
        self.ids = tok.encode(text)

    def __call__(self, request: _RequestLike) -> RequestState:
        script = list(self.ids)
        end = _end_token(self.tok, request)
        if end is not None:
            script.append(end)
        if not script:
            script = [request.prompt_token_ids[-1]]
        state = RequestState(request, script)
        state.vocab_size = self.tok.vocab_size
        return state


def biased_pool(pool: Sequence[int], logit_bias: dict[int, float]) -> Sequence[int]:
    """The ids random mode draws from under ``logit_bias``: the ids biased to 100 if any
    (a forced token), else ``pool`` without the ids biased to -100 (banned); a bias in between
    leaves uniform sampling unchanged (the fake model has no logits to shift).

    >>> biased_pool(range(5), {1: -100.0, 3: -100.0})
    [0, 2, 4]
    >>> biased_pool(range(5), {2: 100.0, 4: 100.0, 0: -100.0})
    [2, 4]
    """
    if not logit_bias:
        return pool
    forced = sorted(t for t, bias in logit_bias.items() if bias >= 100)
    if forced:
        return forced
    banned = {t for t, bias in logit_bias.items() if bias <= -100}
    kept = [t for t in pool if t not in banned]
    return kept or pool  # everything banned: nothing would be left to say


class RandomScripts:
    """Random mode: uniformly random non-special ids, seeded per (seed, request_id), with the
    request's ``logit_bias`` applied (``biased_pool``)."""

    def __init__(self, vocab_size: int, special_ids: frozenset[int], *, seed: int) -> None:
        self.pool = [i for i in range(vocab_size) if i not in special_ids]
        self.seed = seed

    def __call__(self, request: _RequestLike) -> RequestState:
        rng = random.Random(f"{self.seed}:{request.request_id}")
        # IncomingRequest.logit_bias (protocol 4); request-like test objects may lack it
        pool = biased_pool(self.pool, getattr(request, "logit_bias", None) or {})
        return RequestState(request, None, rng=rng, pool=pool)
