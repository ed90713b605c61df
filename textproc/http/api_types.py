"""OpenAI request bodies as msgspec Structs, the validated parameters, and ApiError.

Owns the typed shapes of ``/v1/chat/completions``, ``/v1/completions``, ``/tokenize`` and
``/detokenize`` bodies (decoded and type-checked by msgspec in one pass; unknown fields are
ignored, like vLLM) and of the validated parameters the server hands to the backend. Declarations
only: the rules live in ``textproc.http.openai.bodies``. The options both bodies carry as they are
(sampling values, output switches) are not spelled here: they come from
``textproc.options.BODY_OPTIONS`` (``_OptionFields``, the base of both bodies).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import msgspec

from textproc.errors import TextprocError
from textproc.options import BODY_OPTIONS, BodyOption, OutputOptions, SamplingOptions
from textproc.protocol import LOGIT_BIAS_RANGE, MAX_LOGIT_BIAS, MAX_MODEL_LEN, MAX_TOKEN_ID

__all__ = [
    "ApiError",
    "TextPart",
    "ImageUrl",
    "ImageUrlPart",
    "ImageInput",
    "Content",
    "CONTENT_PART_TYPES",
    "FunctionCall",
    "ToolCall",
    "SystemMessage",
    "DeveloperMessage",
    "UserMessage",
    "AssistantMessage",
    "ToolMessage",
    "Message",
    "FunctionDef",
    "ToolDef",
    "NamedFunction",
    "NamedToolChoice",
    "StreamOptions",
    "ResponseFormat",
    "ChatCompletionBody",
    "CompletionBody",
    "TokenizeBody",
    "DetokenizeBody",
    "ChatParams",
    "CompletionParams",
    "Int0",
    "Int1",
    "TokenId",
]


class ApiError(TextprocError):
    """A request the API refuses, with the HTTP status and OpenAI error fields it maps to.

    >>> ApiError("bad", param="n").body()["error"]["param"]
    'n'
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        close: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.close = close  # the connection cannot be reused (e.g. a body left half read)

    def body(self) -> dict[str, Any]:
        """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


# ---------------------------------------------------------------- request bodies (msgspec)

# integers are bounded where they enter: what the wire frames hold (token ids: uint32; token
# counts: at most protocol.MAX_MODEL_LEN); a sampling value's range is its BodyOption's
Int1 = Annotated[int, msgspec.Meta(ge=1, le=MAX_MODEL_LEN)]
Int0 = Annotated[int, msgspec.Meta(ge=0, le=MAX_MODEL_LEN)]
TokenId = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKEN_ID)]
_Bias = Annotated[float, msgspec.Meta(ge=LOGIT_BIAS_RANGE[0], le=LOGIT_BIAS_RANGE[1])]
# token id (a decimal string: JSON keys are strings) -> bias; ids are checked by the worker
_LogitBias = Annotated[dict[str, _Bias], msgspec.Meta(max_length=MAX_LOGIT_BIAS)]


def _body_field(option: BodyOption) -> tuple[str, Any, Any]:
    """``(name, type, default)`` of an option's body field, for ``msgspec.defstruct``."""
    bounds = {k: v for k in ("ge", "gt", "le") if (v := getattr(option, k)) is not None}
    kind = Annotated[option.kind, msgspec.Meta(**bounds)] if bounds else option.kind
    if option.default_factory is not None:
        return option.name, kind, msgspec.field(default_factory=option.default_factory)
    return option.name, kind if option.default is not None else Optional[kind], option.default


# The fields of both bodies that are options as they are (textproc.options.BODY_OPTIONS), read
# into the request's values by name (openai_api); for the type checker, a plain Struct.
if TYPE_CHECKING:
    _OptionFields = msgspec.Struct
else:
    _OptionFields = msgspec.defstruct("_OptionFields", [_body_field(o) for o in BODY_OPTIONS],
                                      kw_only=True, module=__name__)


class TextPart(msgspec.Struct, tag="text", tag_field="type"):
    """A text content part."""

    text: str


class ImageUrl(msgspec.Struct):
    url: str  # data:image/...;base64,... or http(s)://...
    detail: str | None = None  # OpenAI's hint; the model's processor decides the size


class ImageUrlPart(msgspec.Struct, tag="image_url", tag_field="type"):
    """An image content part (user messages only); audio, video and file parts are a 400."""

    image_url: ImageUrl


Content = str | list[TextPart | ImageUrlPart]
CONTENT_PART_TYPES = "text, image_url (user messages)"


class FunctionCall(msgspec.Struct, omit_defaults=True):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(msgspec.Struct, omit_defaults=True):
    function: FunctionCall
    id: str | None = None
    type: Literal["function"] = "function"


class SystemMessage(msgspec.Struct, tag="system", tag_field="role", omit_defaults=True):
    content: Content
    name: str | None = None


class DeveloperMessage(msgspec.Struct, tag="developer", tag_field="role", omit_defaults=True):
    content: Content
    name: str | None = None


class UserMessage(msgspec.Struct, tag="user", tag_field="role", omit_defaults=True):
    content: Content
    name: str | None = None


class AssistantMessage(msgspec.Struct, tag="assistant", tag_field="role", omit_defaults=True):
    content: Content | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning_content: str | None = None


class ToolMessage(msgspec.Struct, tag="tool", tag_field="role", omit_defaults=True):
    content: Content
    tool_call_id: str | None = None
    name: str | None = None


Message = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage


class FunctionDef(msgspec.Struct, omit_defaults=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(msgspec.Struct):
    """``{"type": "function", "function": {"name", "description", "parameters"}}``."""

    type: Literal["function"]
    function: FunctionDef


class NamedFunction(msgspec.Struct):
    name: str


class NamedToolChoice(msgspec.Struct):
    """``{"type": "function", "function": {"name": ...}}``: force a call to this tool."""

    type: Literal["function"]
    function: NamedFunction


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class JsonSchemaFormat(msgspec.Struct, omit_defaults=True):
    name: str | None = None
    schema_: dict[str, Any] | bool | None = msgspec.field(default=None, name="schema")
    strict: bool | None = None  # true: objects that list properties are closed (always enforced)
    description: str | None = None


class ResponseFormat(msgspec.Struct):
    type: str
    json_schema: JsonSchemaFormat | None = None


class ChatCompletionBody(_OptionFields, kw_only=True):
    """The body of ``POST /v1/chat/completions`` (and the options of ``_OptionFields``);
    unknown fields are ignored (like vLLM)."""

    model: str
    messages: list[Message]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Int1 | None = None
    max_completion_tokens: Int1 | None = None
    n: int = 1
    stop: str | list[str] | None = None
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # reasoning tokens at most, then the reasoning block is closed (vLLM: thinking_token_budget)
    max_reasoning_tokens: int | None = None
    thinking_token_budget: int | None = None
    logit_bias: _LogitBias | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: ResponseFormat | None = None
    # vLLM's structured outputs (textproc.http.openai.structured): enforced, never ignored
    structured_outputs: dict[str, Any] | None = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    documents: list[dict[str, Any]] | None = None
    min_tokens: Int0 = 0
    user: str | None = None


class CompletionBody(_OptionFields, kw_only=True):
    """The body of ``POST /v1/completions`` (and the options of ``_OptionFields``; legacy API:
    ``max_tokens`` defaults to 16)."""

    model: str
    prompt: str | list[str | TokenId | list[TokenId]]  # text, token ids, or a batch of one
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Int1 | None = 16
    n: int = 1
    best_of: int | None = None
    echo: bool = False
    suffix: str | None = None
    stop: str | list[str] | None = None
    logit_bias: _LogitBias | None = None
    logprobs: int | None = None
    response_format: ResponseFormat | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    min_tokens: Int0 = 0
    user: str | None = None


class TokenizeBody(msgspec.Struct, kw_only=True):
    """``POST /tokenize``: either ``prompt`` or ``messages`` (rendered with the chat template)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    tools: list[ToolDef] | None = None
    add_special_tokens: bool | None = None  # None: True for a prompt, False for messages
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None


class DetokenizeBody(msgspec.Struct, kw_only=True):
    """``POST /detokenize``."""

    tokens: list[TokenId]
    model: str | None = None
    skip_special_tokens: bool = False


# ---------------------------------------------------------------- validated parameters


class ImageInput(msgspec.Struct):
    """An image of a chat request: where it is in the body the client sent (``param``, e.g.
    ``messages[0].content[1]``), its URL, and its bytes once loaded (``textproc.http.media``)."""

    param: str
    url: str
    data: bytes = b""


class ChatParams(msgspec.Struct, kw_only=True):
    """A validated chat request: the chat template's inputs, and the request's options as the
    two values ``TextClient.chat`` takes (:mod:`textproc.options`). An image part of a message
    is ``{"type": "image"}`` in ``messages`` (what chat templates read) and its source is in
    ``images``, in prompt order."""

    model: str
    messages: list[dict[str, Any]]
    stream: bool
    include_usage: bool
    tools: list[dict[str, Any]] | None
    tool_choice: str | dict[str, Any]  # "none" | "auto" | "required" | {"type", "function": {"name"}}
    chat_template_kwargs: dict[str, Any]
    add_generation_prompt: bool
    continue_final_message: bool
    documents: list[dict[str, Any]] | None
    structured: dict[str, Any] | None = None  # {"json": schema} | {"regex": str} | {"choice": [str]}
    sampling: SamplingOptions  # n: choices (the server's limit is HttpLimits.max_n)
    output: OutputOptions  # logprobs None: off; k: each token's logprob and k alternatives
    images: list[ImageInput] = msgspec.field(default_factory=list)


class CompletionParams(msgspec.Struct, kw_only=True):
    """A validated completion request."""

    model: str
    prompt: str | list[int]
    stream: bool
    include_usage: bool
    echo: bool
    structured: dict[str, Any] | None = None
    sampling: SamplingOptions
    output: OutputOptions  # logprobs: the body's logprobs (0..5)
