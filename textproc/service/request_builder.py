"""The request building a tokenizer worker does: client frame -> chat template -> ids -> Submit.

Runs every check of what a client sends (the request options' own checks from
:mod:`textproc.options`, the same the HTTP layer runs; the model's limits from
:mod:`textproc.service.request_checks`; the context length here): a bad request raises
``InvalidInput`` / ``TemplateError`` naming the bad value and what is allowed. A good one becomes ONE ``Submit`` frame for the detokenizer
(output setup + the encoded ``EngineRequest``), with the sampling values it left unset taken
from the model's generation_config.json (:mod:`textproc.service.sampling_defaults`, unless
``--generation-config none``) and its constraint decided by
:func:`textproc.service.constraint_plan.plan_constraint`. No sockets: the serve loop is
:mod:`textproc.service.worker`.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from textproc.config import ServiceConfig
from textproc.core.parsing.formats import REASONING_FORMATS, TOOL_FORMATS
from textproc.service.constraint_plan import plan_constraint, structured_constraint
from textproc.service.constraints import WorkerConstraints
from textproc.service.index_store import IndexStore
from textproc.service.sampling_defaults import load_generation_config, stop_token_ids
from textproc.sharding import shard_of
from textproc.core.tok.prompt import PromptTokenizer
from textproc.core.chat.template import RESERVED_VARIABLES, render_chat
from textproc.core.deltas import join_text
from textproc.core.detokenizer import DetokenizerVocab
from textproc.core.pipeline import FINISH_REASONS as PIPELINE_FINISH_REASONS, OutputPipeline
from textproc.core.parsing.detect import detect_formats, resolve_formats
from textproc.errors import InvalidInput, short
from textproc.options import (
    OutputOptions,
    ParseOptions,
    SamplingOptions,
    check_output_options,
    check_sampling_options,
    check_tool_choice,
    check_tools,
)
from textproc.service.request_checks import (
    check_ids,
    check_logit_bias,
    check_messages,
    check_stop_token_ids,
)
from textproc.protocol import (
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    DetokenizeResult,
    EngineImage,
    DerenderRequest,
    Derendered,
    EngineRequest,
    Rendered,
    RenderRequest,
    Submit,
    TokenizeRequest,
    TokenizeResult,
    pack_ids,
)
from textproc.transport import encoder
from textproc.vision.families import load_vision
from textproc.vision.preprocess import ImageCache, PreparedImage

__all__ = ["Built", "RequestBuilder", "MAX_REQUEST_ID_CHARS"]

_log = logging.getLogger("textproc.worker")
MAX_REQUEST_ID_CHARS = 256
_FRAME_SLACK_BYTES = 1 << 20  # a Submit's fields besides the prompt ids and pixel values
# around a message's content that holds special-token text (--special-tokens-in-content text):
# Unicode noncharacters, "for internal use", never text a client means
_MARK_OPEN, _MARK_CLOSE = "\ufdd0", "\ufdd1"


def _check_request_id(request_id: str) -> None:
    if not request_id or len(request_id) > MAX_REQUEST_ID_CHARS:
        raise InvalidInput(
            f"request_id {short(request_id)} must be 1-{MAX_REQUEST_ID_CHARS} characters"
        )


class Built(NamedTuple):
    """A request ready to go: its Submit frame, prompt size and the stage timings (seconds)."""

    submit: Submit
    prompt_tokens: int
    template_s: float = 0.0  # chat template rendering
    tokenize_s: float = 0.0  # encoding the prompt
    engine_request: EngineRequest | None = None  # what ``submit.engine_request`` encodes


class RequestBuilder:
    """Turns client frames into engine requests and Submit frames, validating on the way.

    Pure translation with no sockets, so it is unit-testable: ``chat(req, client_id)`` and
    ``completion(req, client_id)`` return a :class:`Built` or raise InvalidInput /
    TemplateError whose message says what was wrong with the request.
    """

    def __init__(self, tokenizer: PromptTokenizer, config: ServiceConfig) -> None:
        self.tokenizer = tokenizer
        self.config = config
        self.encode = encoder().encode
        # what a request leaves unset (vLLM's "auto"), and the ids that end it like EOS (both
        # modes), from the model's generation_config.json
        generation = load_generation_config(config.model_dir,
                                            sampling=config.generation_config == "auto")
        self.defaults = generation.defaults
        # text -> ids for prompts; the worker puts its PeerPool's encode here (same ids)
        self.encode_text: Callable[..., list[int]] = tokenizer.encode
        added = dict(tokenizer.added_tokens)
        # the tool-call / reasoning format, from the chat template and the added tokens
        self.formats = resolve_formats(detect_formats(tokenizer.chat_template, added),
                                       tool_format=config.tool_format,
                                       reasoning_format=config.reasoning_format)
        if self.formats.tool_format is None:
            _log.warning("tool calls come back as plain content: %s", self.formats.reason)
        else:
            _log.info("tool format %s, reasoning format %s: %s", self.formats.tool_format,
                      self.formats.reasoning_format or "none", self.formats.reason)
        # the tokenizer's EOS and the generation config's eos_token_id: the ids every request
        # stops on unless ignore_eos (vLLM's rule), and the end ids of every compiled constraint
        self.end_ids = generation.end_ids(tokenizer.eos_token_id)
        if any(i >= tokenizer.vocab_size for i in generation.eos_token_ids):
            raise InvalidInput(
                f"eos_token_id {short(list(generation.eos_token_ids))} in "
                f"{generation.eos_source}: the tokenizer has ids 0..{tokenizer.vocab_size - 1}; "
                "fix the file")
        # the special tokens the model's tool-call / reasoning format is spelled in: a forced
        # call writes them (the detokenizer keeps them for the parser the same way)
        markers: set[str] = set()
        tool_format, reasoning_format = self.formats.tool_format, self.formats.reasoning_format
        if tool_format is not None and tool_format in TOOL_FORMATS:
            markers.update(TOOL_FORMATS[tool_format].specials)
        if reasoning_format is not None and reasoning_format in REASONING_FORMATS:
            markers.update(REASONING_FORMATS[reasoning_format].specials)
        store = IndexStore(config.constraint_cache_dir) if config.constraint_cache_dir else None
        self.constraints = WorkerConstraints(tokenizer, self.end_ids,
                                             max_frame_bytes=config.max_frame_bytes,
                                             text_specials=frozenset(markers), store=store,
                                             max_compile_s=config.max_compile_s,
                                             first_seconds=config.first_index_s)
        self._marks = config.special_tokens_in_content == "text"  # see _mark_typed_specials
        # a vision-language model's image processing (None: the model reads no images)
        self.vision = load_vision(config.model_dir)
        self.image_cache = ImageCache()
        self.image_token_id = -1
        if self.vision is not None:
            token = self.vision.family.image_token
            if token not in added:
                raise InvalidInput(
                    f"the model in {config.model_dir} is a {self.vision.family.name} vision "
                    f"model, and its tokenizer has no {token} token; fix the tokenizer files")
            self.image_token_id = added[token]
        # when the request being built reached the worker (time.monotonic(); the worker sets
        # it): a constraint's compile budget counts from there, its schema's regex included
        self.arrived: float | None = None
        self.special_vars: dict[str, Any] = dict(tokenizer.special_tokens_map)
        special = sorted((t for t, i in added.items() if i in tokenizer.special_ids), key=len,
                         reverse=True)
        # special-token text a client typed into a message (matched only in that mode)
        self._specials = re.compile("|".join(map(re.escape, special)) if special else "(?!)")

    # -- chat ----------------------------------------------------------------------------------

    def chat(self, req: ChatRequest, client_id: bytes) -> Built:
        prompt_ids, engine_images, sampling, plan, parse, template_s, tokenize_s = (
            self._chat_parts(req))
        return self._submit(req.request_id, client_id, prompt_ids, sampling, req.output,
                            plan.regex, parse, prompt_param="messages",
                            constraint_param=plan.param,
                            template_s=template_s, tokenize_s=tokenize_s,
                            images=engine_images)

    def _chat_parts(self, req: ChatRequest) -> tuple[list[int], list[EngineImage],
                                                      SamplingOptions, Any, ParseOptions,
                                                      float, float]:
        """A chat request's prompt ids, images, sampling (the constraint plan's), constraint
        plan, parse setup and stage timings: what ``chat`` submits and ``render_only``
        reports."""
        _check_request_id(req.request_id)
        tools = check_tools(req.tools)
        tool_choice, forced_name = check_tool_choice(req.tool_choice, tools, req.structured)
        prepared = self._prepare_images(req.images, req.image_params)
        t0 = time.perf_counter()
        prompt = self.render(req.messages, tools if tool_choice != "none" else None,
                             add_generation_prompt=req.add_generation_prompt,
                             continue_final_message=req.continue_final_message,
                             chat_template_kwargs=req.chat_template_kwargs,
                             documents=req.documents)
        t1 = time.perf_counter()
        prompt_ids = self.encode_prompt(prompt)
        engine_images: list[EngineImage] = []
        if prepared:
            prompt_ids, engine_images = self._place_images(prompt_ids, prepared,
                                                           req.image_params)
        prompt = self._unmarked(prompt)
        template_s, tokenize_s = t1 - t0, time.perf_counter() - t1
        formats = self.formats
        plan = plan_constraint(prompt=prompt, tools=tools, tool_choice=tool_choice,
                               forced_name=forced_name, structured=req.structured,
                               tool_format=formats.tool_format,
                               reasoning_format=formats.reasoning_format,
                               strict_tools=self.config.strict_tools,
                               parallel_tool_calls=req.output.parallel_tool_calls,
                               sampling_params=req.sampling.params)
        sampling = req.sampling
        if plan.sampling_params is not None:
            sampling = dataclasses.replace(sampling, params=plan.sampling_params)
        parse_tools = bool(tools) and tool_choice != "none" and formats.tool_format is not None
        parse = ParseOptions(reasoning=plan.reasoning, tools=parse_tools,
                             starts_in_reasoning=plan.starts_in_reasoning,
                             tool_format=formats.tool_format or TOOL_FORMATS.default,
                             reasoning_format=formats.reasoning_format or REASONING_FORMATS.default,
                             tool_schemas=tools if parse_tools else None)
        return prompt_ids, engine_images, sampling, plan, parse, template_s, tokenize_s

    def render_only(self, req: RenderRequest) -> Rendered:
        """What ``req.request`` would send the engine (``chat`` / ``completion`` up to the
        Submit, every check included): its prompt ids, and its sampling with the model's
        defaults applied and ``max_tokens`` resolved. No constraint is compiled. Images are
        refused: their pixels travel with the engine request, not with ids."""
        _check_request_id(req.request_id)
        inner = req.request
        if isinstance(inner, ChatRequest):
            if inner.images:
                param = inner.image_params[0] if inner.image_params else "messages"
                raise InvalidInput(f"{param} is an image; rendering to token ids takes text "
                                   "only on this server", param=param)
            prompt_ids, _, sampling, _, _, _, _ = self._chat_parts(inner)
            param = "messages"
        else:
            prompt_ids, _ = self._completion_ids(inner)
            sampling, param = inner.sampling, "prompt"
        sampling, max_tokens, _, _ = self._resolved(prompt_ids, sampling, inner.output,
                                                    prompt_param=param)
        return Rendered(req.request_id, pack_ids(prompt_ids),
                        dataclasses.replace(sampling, max_tokens=max_tokens))

    def _prepare_images(self, images: list[bytes], params: list[str]) -> list[PreparedImage]:
        """Each image decoded and preprocessed (from the worker's cache when the same bytes
        came before); a 400 naming the image when the model reads no images or the file is
        bad."""
        if not images:
            return []
        if len(params) != len(images):
            params = [f"image {i}" for i in range(len(images))]
        if self.vision is None:
            raise InvalidInput(
                f"{params[0]} is an image, and the model in {self.config.model_dir} does not "
                "read images (its config.json has no vision_config); send text only",
                param=params[0])
        processing = self.vision.processing
        # the frame's room for pixel values: an image that cannot fit is refused from its
        # header, before it costs a decode (_place_images checks the whole again)
        room = self.config.max_frame_bytes - _FRAME_SLACK_BYTES
        prepared = []
        for data, param in zip(images, params):
            image = self.image_cache.prepare(data, param, processing,
                                             max_pixels=self.config.max_image_pixels,
                                             max_value_bytes=max(0, room))
            if image.pixel_values.nbytes > room:  # a cache hit: prepared for another request
                raise InvalidInput(
                    f"{param}: its pixel values take {image.pixel_values.nbytes} bytes, over "
                    f"the {max(0, room)} bytes left in the request's frame (--max-frame-bytes); "
                    "send a smaller image", param=param)
            room -= image.pixel_values.nbytes
            prepared.append(image)
        return prepared

    def _place_images(self, prompt_ids: list[int], prepared: list[PreparedImage],
                      params: list[str]) -> tuple[list[int], list[EngineImage]]:
        """The prompt with each image's one placeholder token repeated to its token count (what
        vLLM's processor does), and the images as the engine gets them."""
        token_id = self.image_token_id
        at = [i for i, t in enumerate(prompt_ids) if t == token_id]
        if len(at) != len(prepared):
            token = self.vision.family.image_token if self.vision else "?"
            raise InvalidInput(
                f"the rendered prompt has {len(at)} image placeholders ({token}) for "
                f"{len(prepared)} images; image parts go in user messages, and message text "
                f"must not hold {token}", param=params[0] if params else "messages")
        # the pixel values travel in the Submit frame: past the frame limit a receiving socket
        # would drop the connection, so the request is refused here, naming the image
        total = 4 * len(prompt_ids)
        for image, param in zip(prepared, params):
            total += image.pixel_values.nbytes
            if total > self.config.max_frame_bytes - _FRAME_SLACK_BYTES:
                raise InvalidInput(
                    f"{param}: the images' pixel values come to {total} bytes with this one, "
                    f"over what one frame carries ({self.config.max_frame_bytes} bytes, "
                    "--max-frame-bytes); send smaller or fewer images", param=param)
        out: list[int] = []
        engine_images: list[EngineImage] = []
        start = 0
        for position, image in zip(at, prepared):
            out += prompt_ids[start:position]
            engine_images.append(EngineImage(
                image.digest, image.pixel_values.astype("<f4", copy=False).tobytes(),
                image.pixel_values.shape[0], image.pixel_values.shape[1], image.grid_thw,
                len(out), image.n_tokens))
            out += [token_id] * image.n_tokens
            start = position + 1
        out += prompt_ids[start:]
        return out, engine_images

    def prepare(self) -> None:
        """Render and encode a one-turn chat now, with and without a tool, so the chat
        template's jinja compile (~50 ms on Qwen3) and the encoder's lazy tables are paid
        before Ready, not by each worker's first chat. A template that refuses this chat is
        left to the requests (they get its error); nothing here may stop the worker starting."""
        tool = {"type": "function", "function": {"name": "f", "description": "",
                                                 "parameters": {"type": "object"}}}
        for tools in (None, [tool]):
            try:
                prompt = self.render([{"role": "user", "content": "Hello"}], tools)
                self.encode_prompt(prompt)
            except Exception as e:  # noqa: BLE001 - a warm-up; the requests report errors
                _log.debug("warm-up chat not rendered (%s: %s); the first chat compiles it",
                           type(e).__name__, e)

    def render(self, messages: Any, tools: list[dict[str, Any]] | None, *,
               add_generation_prompt: bool = True, continue_final_message: bool = False,
               chat_template_kwargs: dict[str, Any] | None = None,
               documents: list[dict[str, Any]] | None = None) -> str:
        check_messages(messages, self.config.max_prompt_chars)
        template = self.tokenizer.chat_template
        if template is None:
            raise InvalidInput(
                f"the model in {self.config.model_dir} has no chat_template; use a completion "
                "request, or add a chat_template to tokenizer_config.json"
            )
        kwargs = dict(chat_template_kwargs or {})
        # the core's own list of render_chat arguments (documents, template_name, limits...):
        # a client must not set them through template variables
        bad = [k for k in kwargs if not isinstance(k, str) or not k.isidentifier()
               or k in RESERVED_VARIABLES]
        if bad:
            raise InvalidInput(
                f"chat_template_kwargs keys {short(bad)} are not allowed; use identifiers other "
                f"than {sorted(RESERVED_VARIABLES)}", param="chat_template_kwargs")
        if add_generation_prompt and continue_final_message:
            raise InvalidInput("add_generation_prompt and continue_final_message cannot both be true")
        if self.config.special_tokens_in_content == "text":
            messages = self._mark_typed_specials(messages)
        prompt: str = render_chat(template, messages, tools,
                                  add_generation_prompt=add_generation_prompt,
                                  continue_final_message=continue_final_message,
                                  documents=documents,
                                  **{**self.special_vars, **kwargs})
        if len(prompt) > self.config.max_prompt_chars:
            raise InvalidInput(
                f"the rendered prompt has {len(prompt)} characters, over the limit of "
                f"{self.config.max_prompt_chars} characters; shorten the messages",
                param="messages")
        return prompt

    def _unmarked(self, prompt: str) -> str:
        if not self._marks or _MARK_OPEN not in prompt:
            return prompt
        return prompt.replace(_MARK_OPEN, "").replace(_MARK_CLOSE, "")

    def _mark_typed_specials(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Messages whose content holds special-token text, that content wrapped in marks, so
        ``encode_prompt`` encodes it as ordinary text (``--special-tokens-in-content text``)."""
        out = []
        for i, message in enumerate(messages):
            content = message.get("content")
            if isinstance(content, str):
                message = {**message, "content": self._marked(content, f"messages[{i}].content")}
            elif isinstance(content, list):  # text and image parts: each text part alike
                parts = [{**part, "text": self._marked(part["text"],
                                                       f"messages[{i}].content[{j}].text")}
                         if isinstance(part, dict) and isinstance(part.get("text"), str) else part
                         for j, part in enumerate(content)]
                message = {**message, "content": parts}
            out.append(message)
        return out

    def _marked(self, text: str, where: str) -> str:
        """``text`` wrapped in marks when it holds special-token text (else as it is)."""
        if _MARK_OPEN in text or _MARK_CLOSE in text:
            raise InvalidInput(f"{where} holds U+FDD0 or U+FDD1, Unicode noncharacters this "
                               "server uses internally; remove them", param=where)
        return _MARK_OPEN + text + _MARK_CLOSE if self._specials.search(text) else text

    def encode_prompt(self, prompt: str, *, add_special_tokens: bool = False) -> list[int]:
        """Ids of a rendered prompt: marked message contents (see ``_mark_typed_specials``)
        with special tokens' text as ordinary text, the rest (what the template wrote) as
        usual."""
        encode = self.encode_text
        # marks exist only in "text" mode: in "control" mode U+FDD0 typed by a client is text
        if not self._marks or _MARK_OPEN not in prompt:
            return encode(prompt, add_special_tokens=add_special_tokens)
        head, *marked = prompt.split(_MARK_OPEN)
        ids = encode(head)
        for part in marked:
            content, _, rest = part.partition(_MARK_CLOSE)
            ids += self.tokenizer.encode_specials_as_text(content, at_start=False)
            ids += encode(rest)
        if add_special_tokens:  # the post-processor's prefix and suffix around the whole prompt
            probe, framed = encode("a"), encode("a", add_special_tokens=True)
            at = next((i for i in range(len(framed) - len(probe) + 1)
                       if framed[i:i + len(probe)] == probe), 0)
            ids = framed[:at] + ids + framed[at + len(probe):]
        return ids

    def derender(self, req: DerenderRequest) -> Derendered:
        """The output ``req.token_ids`` make for ``req.request`` (a chat request, rendered and
        planned as for generating it): its deltas through the detokenizer's own pipeline
        (stops, special tokens, reasoning and tool-call parsing), ended with the engine's
        ``finish_reason``; the output of the first ``req.skip`` ids is left out."""
        _check_request_id(req.request_id)
        ids = check_ids(req.token_ids, self.tokenizer.vocab_size, "token_ids", "token ids",
                        allow_empty=True)
        chat = req.request
        _, _, _, _, parse, _, _ = self._chat_parts(chat)
        # the worker's Tokenizer is the detokenizer's too (both load runtime.load_tokenizer())
        vocab = cast(DetokenizerVocab, self.tokenizer)
        pipe = OutputPipeline(vocab, chat.output, parse, min_tokens=chat.sampling.min_tokens,
                              request_id=req.request_id)
        skip = min(max(req.skip, 0), len(ids))
        if skip:
            pipe.feed(ids[:skip])  # (what earlier chunks were answered with)
        deltas = pipe.feed(ids[skip:]) if len(ids) > skip and not pipe.is_finished else []
        reason = req.finish_reason
        if not pipe.is_finished and reason in PIPELINE_FINISH_REASONS:
            deltas += pipe.finish(reason)
        return Derendered(req.request_id, join_text(deltas), pipe.finish_reason or reason,
                          pipe.matched_stop)

    # -- completion ----------------------------------------------------------------------------

    def completion(self, req: CompletionRequest, client_id: bytes) -> Built:
        prompt_ids, tokenize_s = self._completion_ids(req)
        constraint = None if req.structured is None else structured_constraint(req.structured)
        return self._submit(req.request_id, client_id, prompt_ids, req.sampling, req.output,
                            constraint, None, prompt_param="prompt", tokenize_s=tokenize_s)

    def _completion_ids(self, req: CompletionRequest) -> tuple[list[int], float]:
        """A completion request's prompt ids and the seconds encoding them took."""
        tokenize_s = 0.0
        _check_request_id(req.request_id)
        if req.prompt_token_ids is not None:
            if req.prompt:
                raise InvalidInput("give prompt or prompt_token_ids, not both", param="prompt")
            prompt_ids = check_ids(req.prompt_token_ids, self.tokenizer.vocab_size, "prompt",
                                   "prompt token ids")
        else:
            if len(req.prompt) > self.config.max_prompt_chars:
                raise InvalidInput(
                    f"the prompt has {len(req.prompt)} characters, over the limit of "
                    f"{self.config.max_prompt_chars} characters", param="prompt")
            t0 = time.perf_counter()
            prompt_ids = self.encode_text(req.prompt, add_special_tokens=req.add_special_tokens)
            tokenize_s = time.perf_counter() - t0
        return prompt_ids, tokenize_s

    # -- tokenize / detokenize -----------------------------------------------------------------

    def tokenize(self, req: TokenizeRequest) -> TokenizeResult:
        _check_request_id(req.request_id)
        if (req.text is None) == (req.messages is None):
            raise InvalidInput(f"request {req.request_id!r}: give exactly one of text or messages")
        if req.messages is not None:
            tools = check_tools(req.tools)
            prompt = self.render(req.messages, tools or None,
                                 add_generation_prompt=req.add_generation_prompt,
                                 chat_template_kwargs=req.chat_template_kwargs)
            ids = self.encode_prompt(prompt, add_special_tokens=req.add_special_tokens)
            return TokenizeResult(req.request_id, pack_ids(ids), self._unmarked(prompt))
        assert req.text is not None
        if len(req.text) > self.config.max_prompt_chars:
            raise InvalidInput(f"text has {len(req.text)} characters, over the limit of "
                               f"{self.config.max_prompt_chars}")
        ids = self.encode_text(req.text, add_special_tokens=req.add_special_tokens)
        return TokenizeResult(req.request_id, pack_ids(ids))

    def detokenize(self, req: DetokenizeRequest) -> DetokenizeResult:
        _check_request_id(req.request_id)
        ids = check_ids(req.token_ids, self.tokenizer.vocab_size, "tokens", "token ids",
                        allow_empty=True)
        text = self.tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens)
        return DetokenizeResult(req.request_id, text)

    # -- validation ----------------------------------------------------------------------------

    def _submit(self, request_id: str, client_id: bytes, prompt_ids: list[int],
                sampling: SamplingOptions, output: OutputOptions, constraint: str | None,
                parse: ParseOptions | None, *, prompt_param: str, template_s: float = 0.0,
                tokenize_s: float = 0.0, constraint_param: str = "response_format",
                images: list[EngineImage] | None = None) -> Built:
        sampling, max_tokens, stop_ids, logit_bias = self._resolved(
            prompt_ids, sampling, output, prompt_param=prompt_param)
        min_tokens = sampling.min_tokens
        n_prompt = len(prompt_ids)
        index_key, table = "", None
        if constraint is not None:
            try:
                index, table = self.constraints.compile(
                    constraint, shard_of(request_id, self.config.n_detokenizers),
                    started=self.arrived)
            except InvalidInput as e:  # the field the constraint came from
                raise InvalidInput(str(e), param=constraint_param) from e
            index_key = index.key
        engine_request = EngineRequest(request_id, pack_ids(prompt_ids), max_tokens, stop_ids,
                                       sampling.params, constraint, min_tokens,
                                       sampling.ignore_eos, logit_bias, index_key,
                                       output.logprobs, self.end_ids, images or [],
                                       sampling.priority, sampling.lora)
        submit = Submit(request_id, client_id, n_prompt, max_tokens, self.encode(engine_request),
                        min_tokens, output, parse, table)
        return Built(submit, n_prompt, template_s, tokenize_s, engine_request)

    def _resolved(self, prompt_ids: list[int], sampling: SamplingOptions, output: OutputOptions,
                  *, prompt_param: str) -> tuple[SamplingOptions, int, list[int], dict[int, float]]:
        """Every check of a request's options against the model, and what they resolve to:
        the sampling with the model's defaults, max_tokens, the stop ids, the logit bias."""
        # messages name no request id: the client knows which request it sent (OpenAI's wording)
        check_sampling_options(sampling)
        sampling = self.defaults.apply(sampling)  # after the check: the file's were checked at load
        check_output_options(output, max_stops=self.config.max_stops,
                             max_stop_chars=self.config.max_stop_chars)
        n_prompt = len(prompt_ids)
        limit = self.config.max_model_len
        if n_prompt == 0:
            raise InvalidInput("the prompt encodes to no tokens", param=prompt_param)
        if n_prompt >= limit:
            raise InvalidInput(
                f"this model's maximum context length is {limit} tokens, but the prompt has "
                f"{n_prompt} tokens; shorten the {prompt_param}", param=prompt_param)
        max_tokens, min_tokens = sampling.max_tokens, sampling.min_tokens
        if max_tokens is None:
            max_tokens = self.defaults.max_tokens_for(room=limit - n_prompt)
        elif n_prompt + max_tokens > limit:
            raise InvalidInput(
                f"this model's maximum context length is {limit} tokens, but you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in the {prompt_param}, "
                f"{max_tokens} in max_tokens); lower max_tokens to at most {limit - n_prompt} "
                f"or shorten the {prompt_param}", param="max_tokens")
        if min_tokens > max_tokens:
            raise InvalidInput(
                f"min_tokens={min_tokens!r}; allowed: 0..max_tokens ({max_tokens})",
                param="min_tokens")
        vocab = self.tokenizer.vocab_size
        extra_ids = check_stop_token_ids(sampling.stop_token_ids, vocab)
        logit_bias = check_logit_bias(sampling.logit_bias, vocab)
        stop_ids = stop_token_ids(self.end_ids, extra_ids, ignore_eos=sampling.ignore_eos)
        return sampling, max_tokens, stop_ids, logit_bias
