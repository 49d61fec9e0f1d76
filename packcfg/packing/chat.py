"""Chat SFT rows (`{"messages": [{"role", "content"}, ...]}`) rendered with the tokenizer folder's own chat
template, tokenized, and masked so that only assistant turns are trained on.

What matches whom:
- Rendering follows `transformers` `apply_chat_template` (5.23, utils/chat_template_utils.py): the template
  from `chat_template.jinja`, else `tokenizer_config.json`'s `chat_template` (a string, or a list of named
  templates: "default"); an `ImmutableSandboxedEnvironment` with trim_blocks/lstrip_blocks and loop controls;
  `raise_exception`, a `tojson` that does not HTML-escape, `strftime_now`; the special tokens of
  tokenizer_config.json as variables; `add_generation_prompt` false; the text tokenized without added
  special tokens (the template writes BOS itself). A test compares the ids with `apply_chat_template`.
- The sandbox is the point: a template is data from disk and must not run code. Attribute access to
  `__class__`, `__mro__`, ... raises jinja's SecurityError, reported as one line naming the template file.
- The loss mask follows megatron-bridge (HEAD `data/conversation_processing.py`, `loss_mode="assistant"`):
  assistant turns only, their content and the end-of-turn token the template closes them with
  (`<|im_end|>`, `<|eot_id|>`: the model learns to stop); role headers, system, user and tool turns are not
  trained on. Bridge finds the turn from `{% generation %}` blocks or known marker tokens (and trims an empty
  `<think></think>` wrapper); here from the render itself, for any template: each message's (stripped)
  content is found in the render in message order, and the end-of-turn text is what the render of
  messages[:k+1] writes after turn k's content, less trailing whitespace (ChatML's newline after `<|im_end|>`
  is not generated). Wrappers a template adds around the content (Qwen3's empty think block) are context. A
  template that rewrites the content is refused, one line, never masked wrongly.
- EOS: Bridge v0.3.1 `_chat_preprocess` appended the tokenizer's EOS (supervised) when the render did not end
  with it; Bridge HEAD no longer does, the end-of-turn token is the stop. packcfg follows HEAD: the sample
  is the render, nothing appended.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.core.inputs import check_input
from packcfg.packing.errors import PackingError
from packcfg.packing.tokenizer import read_json_object

ROLES = ("system", "user", "assistant", "tool")
SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # tokenizer_config.json may store {"content": "<s>", ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


@dataclass
class ChatTemplate:
    """A compiled, sandboxed chat template and the variables `transformers` gives it."""

    source: Path  # the file the template came from (named in every error)
    template: Any  # jinja2.Template
    variables: dict[str, Any]

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = False) -> str:
        import jinja2

        try:
            # tools and documents are defined (None) as transformers defines them: templates test them
            return self.template.render(
                messages=messages,
                tools=None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **self.variables,
            )
        except jinja2.TemplateError as exc:  # SecurityError, raise_exception(), undefined-variable misuse
            raise PackingError(f"{self.source}: chat template refused: {_one_line(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - a template can fail in any filter; one line, never a traceback
            raise PackingError(
                f"{self.source}: chat template failed: {type(exc).__name__}: {_one_line(exc)}"
            ) from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def load_chat_template(folder: Path) -> ChatTemplate:
    """The chat template of a local Hugging Face tokenizer folder, compiled in jinja's immutable sandbox."""
    config_path = folder / "tokenizer_config.json"
    config = read_json_object(config_path) or {}
    jinja_path = folder / "chat_template.jinja"
    if os.path.lexists(jinja_path):  # transformers prefers the separate file when both exist
        check_input(jinja_path, error=PackingError)
        source = jinja_path
        try:
            text: Any = jinja_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PackingError(f"{jinja_path}: cannot read ({_one_line(exc)})") from None
    else:
        source, text = config_path, config.get("chat_template")
        if isinstance(text, list):  # named templates: [{"name": "default", "template": "..."}, ...]
            named = {t.get("name"): t.get("template") for t in text if isinstance(t, dict)}
            text = named.get("default")
    if not isinstance(text, str) or not text.strip():
        raise PackingError(
            f"{folder}: no chat template (need chat_template.jinja or a 'chat_template' in tokenizer_config.json)"
        )
    variables = {key: tok for key in SPECIAL_TOKEN_KEYS if (tok := _token_text(config.get(key))) is not None}
    return ChatTemplate(source, _compile(text, source), variables)


def _compile(text: str, source: Path) -> Any:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` (transformers' assistant-mask markers): rendered as its body;
        the mask comes from prefix renders, which need no markers."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body).set_lineno(lineno)

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys=False
    ):
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = lambda *args, **kwargs: dict(*args, **kwargs)  # not the type: no dict.mro() etc.
    try:
        return env.from_string(text)
    except jinja2.TemplateSyntaxError as exc:
        raise PackingError(f"{source}: chat template line {exc.lineno}: {_one_line(exc)}") from None


def check_messages(path: Path, lineno: int, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The row's messages, or a one-line PackingError naming file, line and message."""
    messages = obj.get("messages")
    where = f"{path}:{lineno}"
    if not isinstance(messages, list) or not messages:
        raise PackingError(f"{where}: 'messages' must be a non-empty list of {{role, content}} objects")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise PackingError(f"{where}: messages[{i}] must be an object, got {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise PackingError(f"{where}: messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}")
        if not isinstance(m.get("content"), str):
            got = type(m.get("content")).__name__ if "content" in m else "nothing"
            raise PackingError(f"{where}: messages[{i}].content must be a string, got {got}")
    if not any(m["role"] == "assistant" for m in messages):
        raise PackingError(f"{where}: no assistant message (nothing to train on)")
    return messages


def assistant_spans(
    template: ChatTemplate, messages: list[dict[str, Any]], where: str
) -> tuple[str, list[tuple[int, int]]]:
    """The full render and the character spans [start, end) of each assistant turn's trained text: the turn's
    content as the render shows it, then the end-of-turn text the template writes right after it."""
    full = template.render(messages)
    spans = []
    cursor = 0  # the render follows message order: each content is looked for after the previous one
    for k, m in enumerate(messages):
        content = m["content"].strip()  # templates often trim (Llama 3's `| trim`)
        pos = full.find(content, cursor) if content else -1
        if m["role"] != "assistant":
            cursor = pos + len(content) if pos >= 0 else cursor  # a system prompt may be dropped or rewritten
            continue
        upto = template.render(messages[: k + 1]).rstrip()  # ends with this turn and its end-of-turn text
        at = upto.rfind(content) if content else -1
        suffix = upto[at + len(content) :] if at >= 0 else None
        if pos < 0 or suffix is None or not full.startswith(suffix, pos + len(content)):
            raise PackingError(
                f"{where}: messages[{k}]: the assistant content does not appear as written in the render of "
                f"the chat template ({template.source.name}), so its loss mask cannot be placed"
            )
        cursor = pos + len(content) + len(suffix)
        spans.append((pos, cursor))
    return full, spans


def span_mask(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> np.ndarray:
    """Input-aligned mask over tokens with these character offsets: 1 where a token starts inside a span."""
    starts = np.fromiter((s for s, _ in offsets), dtype=np.int64, count=len(offsets))
    mask = np.zeros(len(offsets), dtype=np.int8)
    for a, b in spans:
        mask[(starts >= a) & (starts < b)] = 1
    return mask
