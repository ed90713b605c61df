"""CHATML_TEMPLATE: the project's own chat template for vocabularies that bring none.

ChatML turns (``<|im_start|>role\\n...<|im_end|>\\n``) with Qwen3's conventions: tools listed in
the system turn inside ``<tools></tools>``, assistant tool calls as
``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`` (arguments given as a dict are
written with ``tojson``, as a string verbatim), tool results folded into a user turn as
``<tool_response>...</tool_response>``, and reasoning kept only for assistant turns after the last
user query. Message content may be a string or a list of ``{"type": "text", "text": ...}`` parts.

Thinking is switched by the ``enable_thinking`` variable: left undefined the generation prompt is
a bare ``<|im_start|>assistant\\n`` (the model decides, as with Qwen3); ``false`` pre-fills an empty
``<think>\\n\\n</think>\\n\\n`` block (thinking off); ``true`` pre-fills ``<think>\\n`` so the output
starts inside reasoning (``prompt_starts_in_reasoning`` then says True).
Must not: use anything transformers' sandbox lacks; it is rendered by transformers in the tests.
"""

from __future__ import annotations

__all__ = ["CHATML_TEMPLATE"]

CHATML_TEMPLATE = r"""{%- macro text(content) -%}
    {%- if content is none or content is undefined -%}
    {%- elif content is string -%}
        {{- content -}}
    {%- elif content is mapping -%}
        {{- content.text if content.text is string else '' -}}
    {%- elif content is iterable -%}
        {%- for part in content -%}
            {%- if part is string -%}
                {{- part -}}
            {%- elif part is mapping and part.text is string -%}
                {{- part.text -}}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{- content -}}
    {%- endif -%}
{%- endmacro -%}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- text(messages[0].content) + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + text(messages[0].content) + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(last_query_index=messages|length - 1, found=false) %}
{%- for message in messages|reverse %}
    {%- if not ns.found and message.role == 'user' %}
        {%- set content = text(message.content) %}
        {%- if not (content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}
            {%- set ns.found = true %}
            {%- set ns.last_query_index = messages|length - loop.index %}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = text(message.content) %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set reasoning = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning) %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- elif enable_thinking is defined and enable_thinking %}
        {{- '<think>\n' }}
    {%- endif %}
{%- endif %}
"""
