"""Which chat template: the one transformers would pick among named templates, and the one
stored in a model directory or file, read the way transformers reads it.

Reads only the files it is handed; the template is rendered elsewhere
(:mod:`textproc.core.chat.template`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from textproc.errors import InvalidInput, short

__all__ = ["load_chat_template", "select_template"]


def select_template(
    template: str | Mapping[str, str] | Sequence[Mapping[str, str]],
    *,
    tools: object = None,
    name: str | None = None,
) -> tuple[str | None, str]:
    """Pick the template source transformers' ``get_chat_template`` would: ``(name, source)``.

    A string is used as is (``name`` None). Named templates (dict, or tokenizer_config's list of
    ``{"name", "template"}``): ``name`` if given, else ``tool_use`` when ``tools is not None``
    (even an empty list), else ``default``.
    """
    if isinstance(template, str):
        return None, template
    templates = _named_templates(template)
    if name is not None:
        if name not in templates:
            raise InvalidInput(f"no chat template named {name!r}; available: {sorted(templates)}")
        return name, templates[name]
    if tools is not None and "tool_use" in templates:
        return "tool_use", templates["tool_use"]
    if "default" in templates:
        return "default", templates["default"]
    raise InvalidInput(
        f"multiple chat templates and none named 'default'; pass template_name, one of {sorted(templates)}"
    )


def load_chat_template(path: str | os.PathLike[str]) -> str | dict[str, str] | None:
    """The chat template stored in a model directory or file, as transformers loads it.

    A directory: ``chat_template.jinja`` (plus ``additional_chat_templates/*.jinja``) wins over
    tokenizer_config.json's ``chat_template`` (a string or a ``[{"name", "template"}]`` list).
    A ``.jinja`` file is read as is; a ``.json`` file is read as a tokenizer_config. None when
    there is no template.
    """
    where = Path(path)
    if where.is_dir():
        templates: dict[str, str] = {}
        if (where / "chat_template.jinja").is_file():
            templates["default"] = (where / "chat_template.jinja").read_text(encoding="utf-8")
        extra = where / "additional_chat_templates"
        if extra.is_dir():
            for file in sorted(extra.glob("*.jinja")):
                templates[file.stem] = file.read_text(encoding="utf-8")
        if templates:
            return templates["default"] if list(templates) == ["default"] else templates
        config = where / "tokenizer_config.json"
        return _config_template(config) if config.is_file() else None
    if where.suffix == ".json":
        return _config_template(where)
    try:
        return where.read_text(encoding="utf-8")
    except OSError as e:
        raise InvalidInput(f"cannot read chat template {str(where)!r}: {e}") from e


def _named_templates(template: Mapping[str, str] | Sequence[Mapping[str, str]]) -> dict[str, str]:
    if isinstance(template, Mapping):
        items = list(template.items())
    elif isinstance(template, Sequence):
        try:
            items = [(entry["name"], entry["template"]) for entry in template]
        except (TypeError, KeyError) as e:
            raise InvalidInput(
                f"a list of chat templates must hold {{'name', 'template'}} dicts, got {short(template)}"
            ) from e
    else:
        raise InvalidInput(f"chat template must be a str, dict or list, got {type(template).__name__}")
    for name, source in items:
        if not isinstance(source, str):
            raise InvalidInput(f"chat template {name!r} must be a str, got {type(source).__name__}")
    return {str(name): source for name, source in items}


def _config_template(config: Path) -> str | dict[str, str] | None:
    try:
        value = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError, AttributeError) as e:
        raise InvalidInput(f"cannot read chat_template from {str(config)!r}: {e}") from e
    if value is None or isinstance(value, str):
        return value
    return _named_templates(value)
