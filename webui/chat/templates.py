"""Instruction templates: the model's own chat template, built-in ones for models without (or with a wrong) one,
and the user's own Jinja files.

A choice is a name: "" (the model's own; a model without one gets the built-in its
special tokens point to, and the note says which), a built-in name, or the name of
a user template saved as ``<user data>/templates/<name>.jinja``. Templates are Jinja
in the shape transformers uses (``messages``, ``add_generation_prompt``,
``bos_token``, ``eos_token``), rendered in transformers' sandbox. Built-ins whose
turns have no end token (User/Assistant, Alpaca, Vicuna) carry stop strings, so a
reply ends where the next turn would begin.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from loaders.base import Tokenizer
from webui.fsutil import atomic_write_text
from webui.names import InvalidName, check_name, inside

MODEL_OWN = ""
SUFFIX = ".jinja"

_SYSTEM = "{% set sys = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '' %}"
_ALPACA_SYSTEM = ("Below is an instruction that describes a task. Write a response that appropriately completes "
                  "the request.")
_VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                  "helpful, detailed, and polite answers to the user's questions.")

BUILTIN: dict[str, str] = {
    "ChatML": ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
    "Llama 3": ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
                "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"),
    "Mistral": ("{{ bos_token }}" + _SYSTEM + "{% for m in messages if m['role'] != 'system' %}"
                "{% if m['role'] == 'user' %}[INST] {% if loop.first and sys %}{{ sys }}\n\n{% endif %}"
                "{{ m['content'] }} [/INST]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"),
    "Gemma": ("{{ bos_token }}" + _SYSTEM + "{% for m in messages if m['role'] != 'system' %}<start_of_turn>"
              "{{ 'model' if m['role'] == 'assistant' else 'user' }}\n{% if loop.first and sys %}{{ sys }}\n\n"
              "{% endif %}{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
              "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"),
    "Phi-3": ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"),
    "Alpaca": ("{% set sys = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '"
               + _ALPACA_SYSTEM + "' %}{{ sys }}\n\n{% for m in messages if m['role'] != 'system' %}"
               "{% if m['role'] == 'user' %}### Instruction:\n{{ m['content'] }}\n\n{% else %}### Response:\n"
               "{{ m['content'] }}\n\n{% endif %}{% endfor %}{% if add_generation_prompt %}### Response:\n{% endif %}"),
    "Vicuna": ("{% set sys = messages[0]['content'] if messages and messages[0]['role'] == 'system' else \""
               + _VICUNA_SYSTEM + "\" %}{{ sys }}\n\n{% for m in messages if m['role'] != 'system' %}"
               "{% if m['role'] == 'user' %}USER: {{ m['content'] }}\n{% else %}ASSISTANT: {{ m['content'] }}"
               "{{ eos_token }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"),
    "User/Assistant": ("{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}\n\n"
                       "{% elif m['role'] == 'user' %}User: {{ m['content'] }}\n{% else %}Assistant: "
                       "{{ m['content'] }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"),
}
# Where a turn has no end token of its own, the text that starts the next turn ends the reply.
STOPS: dict[str, tuple[str, ...]] = {"Alpaca": ("### Instruction:",), "Vicuna": ("USER:",),
                                     "User/Assistant": ("\nUser:",)}
# Where the model writes the user's turn (Impersonate), the text that starts the assistant's turn ends it.
USER_STOPS: dict[str, tuple[str, ...]] = {"Alpaca": ("### Response:",), "Vicuna": ("ASSISTANT:",),
                                          "User/Assistant": ("\nAssistant:",)}
# A special token in the vocabulary -> the built-in that uses it (first match wins).
MARKERS = (("<|im_start|>", "ChatML"), ("<|start_header_id|>", "Llama 3"), ("<start_of_turn>", "Gemma"),
           ("<|assistant|>", "Phi-3"), ("[INST]", "Mistral"))
FALLBACK = "User/Assistant"
SAMPLE = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi!"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "How are you?"}]


class TemplateError(ValueError):
    """A template that cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class ChatTemplate:
    """The template a chat is rendered with: ``source`` None means the model's own (its tokenizer renders)."""

    name: str
    source: str | None = None
    note: str = ""
    """Said to the user: why this template (e.g. the model has none and this one was guessed)."""

    @property
    def stops(self) -> tuple[str, ...]:
        """Stop strings for the assistant's turn (built-ins whose turns have no end token)."""
        return STOPS.get(self.name, ()) if self.builtin else ()

    @property
    def user_stops(self) -> tuple[str, ...]:
        """Stop strings for a user's turn written by the model."""
        return USER_STOPS.get(self.name, ()) if self.builtin else ()

    @property
    def builtin(self) -> bool:
        return self.source is not None and self.source == BUILTIN.get(self.name)

    def user_turn_prompt(self, tokenizer: Any, messages: list[dict]) -> str:
        """The chat rendered up to where the user's next message would begin (for the model to write it)."""
        mark = "\u2063NEXT-USER-MESSAGE\u2063"
        full = self.render(tokenizer, [*messages, {"role": "user", "content": mark}], add_generation_prompt=False)
        if mark not in full:
            raise TemplateError("this template does not write a user message's content, so the model cannot "
                                "write one")
        return full[:full.index(mark)]

    def render(self, tokenizer: Any, messages: list[dict], add_generation_prompt: bool = True,
               tools: list[dict] | None = None) -> str:
        if self.source is None:
            return tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tools=tools)
        return render_source(self.source, messages, add_generation_prompt, special_tokens(tokenizer), tools)

    def to_record(self) -> dict[str, str] | None:
        """What a reproduce record keeps: None for the model's own, else the name and the source."""
        return None if self.source is None else {"name": self.name, "source": self.source}


def special_tokens(tokenizer: Any) -> dict[str, str]:
    """bos_token and eos_token as text, where the tokenizer says them."""
    get = getattr(tokenizer, "special_tokens", None)
    return dict(get()) if callable(get) else {"bos_token": "", "eos_token": ""}


def render_source(source: str, messages: list[dict], add_generation_prompt: bool = True,
                  special: Mapping[str, str] | None = None, tools: list[dict] | None = None) -> str:
    """Render Jinja ``source`` in transformers' sandbox; TemplateError says what went wrong."""
    from jinja2 import TemplateError as JinjaError
    from transformers.utils.chat_template_utils import render_jinja_template

    try:
        variables: dict[str, Any] = {"bos_token": "", "eos_token": "", **(special or {})}
        # annotated "-> str", it returns (the rendered conversations, their generation indices)
        result: Any = render_jinja_template([messages], tools=None if tools is None else [*tools],
                                            chat_template=source, add_generation_prompt=add_generation_prompt,
                                            **variables)
        rendered, _ = result
    except JinjaError as exc:
        raise TemplateError(f"the chat template could not be rendered: {exc}") from None
    except (TypeError, ArithmeticError, LookupError, AttributeError) as exc:  # the template's own mistake
        raise TemplateError(f"the chat template could not be rendered: {type(exc).__name__}: {exc}") from None
    return rendered[0]


def check_source(source: str) -> None:
    """A template must render a short sample conversation (TemplateError otherwise)."""
    if not isinstance(source, str) or not source.strip():
        raise TemplateError("the template is empty; write Jinja that renders `messages`")
    text = render_source(source, SAMPLE)
    if "How are you?" not in text:
        raise TemplateError("the template does not write the messages' content (use {{ m['content'] }} inside "
                            "{% for m in messages %})")


def guess(tokenizer: Any) -> str:
    """The built-in a model's special tokens point to (User/Assistant when none does)."""
    for marker, name in MARKERS:
        try:
            if len(tokenizer.encode(marker, add_special_tokens=False)) == 1:
                return name
        except Exception:  # a tokenizer that cannot encode the marker does not have it
            continue
    return FALLBACK


class TemplateStore:
    """Built-in templates and the user's own (``<dir>/<name>.jinja``)."""

    def __init__(self, directory: Path):
        self.directory = directory

    def names(self) -> list[str]:
        """Built-ins, then the user's templates (sorted)."""
        own = sorted(p.stem for p in self.directory.glob(f"*{SUFFIX}")) if self.directory.is_dir() else []
        return list(BUILTIN) + [n for n in own if n not in BUILTIN]

    def source(self, name: str) -> str:
        if name in BUILTIN:
            return BUILTIN[name]
        path = self._path(name)
        if not path.is_file():
            raise TemplateError(f"there is no template '{name}'; choose one of: {', '.join(self.names())}")
        try:
            return inside("template", self.directory, path).read_text(encoding="utf-8")
        except InvalidName as exc:
            raise TemplateError(str(exc)) from None
        except UnicodeDecodeError as exc:
            raise TemplateError(f"the template file {path} is not UTF-8 text ({exc}); fix or delete it") from None

    def save(self, name: str, source: str) -> str:
        """Check and save a user template; the name as saved. Built-in names are refused."""
        name = _checked(name)
        if name in BUILTIN:
            raise TemplateError(f"'{name}' is a built-in template; save yours under another name")
        check_source(source)
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self._path(name), source)
        return name

    def delete(self, name: str) -> None:
        if name in BUILTIN:
            raise TemplateError(f"'{name}' is built in and cannot be deleted")
        path = self._path(name)
        if not path.is_file():
            raise TemplateError(f"there is no template '{name}'")
        path.unlink()

    def resolve(self, choice: str | None, tokenizer: Tokenizer) -> ChatTemplate:
        """The template for ``choice`` ("" or None: the model's own, or a guessed built-in when it has none)."""
        if choice:
            return ChatTemplate(choice, self.source(choice))
        if tokenizer.chat_template:
            return ChatTemplate(MODEL_OWN)
        name = guess(tokenizer)
        return ChatTemplate(name, BUILTIN[name], f"this model has no chat template; using the built-in '{name}' "
                                                 "(guessed from its special tokens; choose another in Chat)")

    def _path(self, name: str) -> Path:
        return self.directory / f"{_checked(name)}{SUFFIX}"


def _checked(name: Any) -> str:
    try:
        return check_name("template", name)
    except InvalidName as exc:
        raise TemplateError(str(exc)) from None


def from_record(data: Any) -> ChatTemplate | None:
    """A record's chat_template entry back into a template (None: the model's own)."""
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("source"), str):
        raise TemplateError('a record\'s chat_template must be {"name": ..., "source": "<Jinja>"}')
    return ChatTemplate(str(data.get("name") or "custom"), data["source"])
