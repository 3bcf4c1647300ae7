"""ParametersController: the Parameters tab's behaviour (the controls' values, presets, what is remembered).

The controls hold what was typed (numbers as text too); ``resolve`` turns them into the SamplingParams used, by
one rule for every field: a wrong value stays in its box as typed, is not used, and the message beside it says
why and what is used instead, the last good value (what was used before it was typed). ``params_from_values``
is the strict form (an InvalidParameter names the parameter).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from webui.controllers.errors import UserError
from webui.engine.params import InvalidParameter, ParamSpec, SamplingParams, check_value, specs
from webui.engine.sampling import active_samplers
from webui.names import InvalidName
from webui.presets import Preset, PresetError
from webui.services import Services


def params_from_values(values: dict[str, Any]) -> SamplingParams:
    """SamplingParams from the controls' values (the rest neutral); InvalidParameter names the parameter."""
    return SamplingParams.from_dict({name: _from_control(name, specs()[name].widget, value)
                                     for name, value in values.items()})


def values_from_params(params: SamplingParams) -> list[Any]:
    """The controls' values for ``params``, in the specs' order."""
    d = params.to_dict()
    return [_to_control(spec, d[name]) for name, spec in specs().items()]


@dataclass(frozen=True)
class Resolved:
    params: SamplingParams
    """What is used: each right value as typed, each wrong one's last good value."""
    messages: dict[str, str]
    """Parameter -> the message beside its control, for each control holding a wrong value."""


def resolve(values: dict[str, Any], last: SamplingParams) -> Resolved:
    """The parameters the controls' ``values`` give, by one rule for every field: a wrong value is not used, the
    last good one (its value in ``last``) is, and its message says so."""
    good: dict[str, Any] = {}
    wrong: dict[str, InvalidParameter] = {}
    for name, value in values.items():
        try:
            good[name] = check_value(name, _from_control(name, specs()[name].widget, value))
        except InvalidParameter as exc:
            wrong[name] = exc
    while True:
        try:
            params = last.replace(**good)
            break
        except InvalidParameter as exc:  # a rule between fields (min_new_tokens <= max_new_tokens)
            new = [name for name, value in good.items() if value != getattr(last, name)]
            blamed = [exc.param] if exc.param in new else new  # the value just typed, not the one it meets
            if not blamed:
                params = last
                break
            for name in blamed:
                wrong[name] = exc
                del good[name]
    return Resolved(params, {name: not_used_text(name, values[name], exc, last) for name, exc in wrong.items()})


def shown_with(name: str) -> list[str]:
    """The parameters whose messages a change of ``name`` can change: its own, and the other side of a rule
    between fields (a wrong min_new_tokens can be put right by max_new_tokens)."""
    pair = ("min_new_tokens", "max_new_tokens")
    return list(pair) if name in pair else [name]


def not_used_text(name: str, typed: Any, exc: InvalidParameter, last: SamplingParams) -> str:
    """The message beside a control holding a wrong value: what is not used, why, and what is used instead."""
    reason, tail = str(exc), f", got {exc.value!r}"
    reason = reason[:-len(tail)] if reason.endswith(tail) else reason  # the box shows what was typed
    used = _short(_to_control(specs()[name], last.to_dict()[name])) or "none"
    typed_text = _short(typed)
    if specs()[name].widget == "constraint":  # its box holds the form's text, not this JSON
        typed_text = "This constraint"
    said = f"{typed_text} is" if typed_text else "An empty box is"
    return f"⚠ {said} not used: {reason}; using {used} (the last good value)."


def _short(value: Any) -> str:
    """A control's value on one short line ("" for an empty box)."""
    text = "" if value is None else str(value)
    text = " · ".join(line.strip() for line in text.splitlines() if line.strip())
    return text if len(text) <= 40 else text[:39] + "…"


def _from_control(name: str, widget: str, value: Any) -> Any:
    if widget == "lines":  # one string a line, with \n and \t typed as escapes
        return [s.replace("\\n", "\n").replace("\\t", "\t") for s in (value or "").splitlines() if s]
    if widget in ("json", "constraint"):
        try:
            parsed = json.loads(value) if (value or "").strip() else {}
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise InvalidParameter(name, f'{name} must be a JSON object like {{"2": -100}}, got {value!r}', value)
        return parsed
    if isinstance(value, str):  # a number box holds what was typed
        text = value.strip()
        for number in (int, float):
            try:
                return number(text) if text else None
            except ValueError:
                pass
    return value


def _to_control(spec: ParamSpec, value: Any) -> Any:
    if spec.widget == "lines":
        return "\n".join(s.replace("\n", "\\n").replace("\t", "\\t") for s in value)
    if spec.widget in ("json", "constraint"):
        return json.dumps(value) if value else ""
    if spec.widget == "text":
        if spec.to_text is None:
            raise TypeError(f"a text control needs its spec's to_text: {spec}")
        return spec.to_text(value)
    if value is None:  # an alias stands for "not set" (seed -1)
        return next((alias for alias, meaning in spec.aliases if meaning is None), None)
    return value


# The "Constrain output" control: a form (these labels -> structured_outputs' forms) and the text for it.
CONSTRAINT_FORMS = {"none": None, "JSON (any object)": "json_object", "JSON schema": "json", "regex": "regex",
                    "choice (one a line)": "choice", "grammar (GBNF or Lark)": "grammar"}
CONSTRAINT_HINTS = {
    "json": '{"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}',
    "regex": "[0-9]{3}-[0-9]{4}", "choice": "yes\nno\nmaybe",
    "grammar": 'root ::= "yes" | "no"   (GBNF, as llama.cpp takes it; or Lark: start: "yes" | "no")'}


def constraint_json(form_label: str | None, text: str | None) -> str:
    """The structured_outputs value (as its JSON control holds it) for a form and its text; "" for none or no
    text. Text that is not usable is passed on as it is, for the check to name the problem."""
    form, text = CONSTRAINT_FORMS.get(form_label or "none"), text or ""
    if form is None:
        return ""
    if form == "json_object":
        value: Any = True
    elif form == "choice":
        value = [line for line in text.splitlines() if line.strip()]
    elif form == "json":
        try:
            value = json.loads(text)
        except ValueError:
            value = text
    else:
        value = text
    return json.dumps({form: value}) if value not in ("", []) and str(value).strip() else ""


def constraint_fields(value: str) -> tuple[str, str | None] | None:
    """(form label, text or None where the form takes none) for a structured_outputs JSON value; None when it
    cannot be read as one form (the parameter check says why)."""
    try:
        parsed = json.loads(value) if (value or "").strip() else {}
    except ValueError:
        return None
    if not isinstance(parsed, dict) or len(parsed) > 1:
        return None
    if not parsed:
        return "none", None
    (form, given), = parsed.items()
    label = next((label for label, f in CONSTRAINT_FORMS.items() if f == form), None)
    if label is None:
        return None
    if form == "json_object":
        return label, None
    if form == "choice":
        return label, "\n".join(given) if isinstance(given, list) else str(given)
    if form == "json" and not isinstance(given, str):
        return label, json.dumps(given, indent=2)
    return label, str(given)


def constraint_note(value: str) -> str:
    """The Chat tab's line while an output constraint is on ("" while none is): which form, and its text in
    short."""
    fields = constraint_fields(value)
    if fields is None or fields[0] == "none":
        return ""
    label, text = fields
    shown = " · ".join(line.strip() for line in (text or "").splitlines() if line.strip())
    shown = f": `{shown[:80]}{'…' if len(shown) > 80 else ''}`" if shown else ""
    return (f"**Replies are constrained** to {label}{shown} (Parameters → Constrain output; your side, "
            "Impersonate, is not)")


def same_constraint(a: str, b: str) -> bool:
    """Whether two structured_outputs JSON texts say the same (spacing and key order aside)."""
    def read(text: str) -> Any:
        try:
            return json.loads(text) if (text or "").strip() else {}
        except ValueError:
            return text
    return read(a) == read(b)


def pipeline_text(params: SamplingParams) -> str:
    """The steps that run for ``params``, in order, and how the token is then chosen (Markdown)."""
    steps = " → ".join(f"`{name}`" for name in active_samplers(params))
    then = "the most likely token is taken (greedy)" if params.greedy else "a token is drawn"
    if not steps:
        return f"**Runs now:** nothing; {then} from the model's own distribution."
    return f"**Runs now, in order:** {steps}; then {then}."


def field_text(name: str) -> str:
    """A control's own line under its label: the parameter's help (and range, for a number box)."""
    spec = specs()[name]
    return f"{spec.help} {spec.range_text()}" if spec.widget == "number" else spec.help


def slider_range(spec: ParamSpec) -> tuple[float, float, float]:
    """A slider's own (low end, high end, step): the spec's bounds, the low one a step in where it is excluded."""
    if spec.minimum is None or spec.maximum is None or spec.step is None:
        raise TypeError(f"a slider needs a minimum, maximum and step: {spec}")
    low = spec.minimum + spec.step if spec.min_exclusive else spec.minimum
    return low, spec.maximum, spec.step


@dataclass(frozen=True)
class Edited:
    """What became of one control's change: the parameters now used and saved, and the messages beside the
    controls holding wrong values."""

    params: SamplingParams
    messages: dict[str, str]
    changed: bool = False
    """Whether the parameters differ from those saved before."""


BUILT_IN = ("'{}' is built in: it cannot be deleted. To change it, change its values and save them under another "
            "name.")


class ParametersController:
    def __init__(self, services: Services) -> None:
        self.services, self.presets, self.settings = services, services.presets, services.settings

    def current(self, values: dict[str, Any]) -> SamplingParams:
        """What the controls' values give, as generation uses them: a wrong value's last good value (its message
        beside it says so)."""
        return resolve(values, self.saved()[0]).params

    def edit(self, values: dict[str, Any], name: str) -> Edited:
        """Keep the controls' values after the user changed control ``name``: a wrong value is not used (the last
        good one stays saved and is used) and each is named beside its control. Values changed from a preset
        remember it, to say so; typed back to the preset's, they are the preset again."""
        s, last = self.settings.get(), self.saved()[0]
        resolved = resolve(values, last)
        params = resolved.params
        changed = params != last  # not a wrong value, or a value typed back
        if changed:
            base = s.last_preset or s.changed_from
            differs = self.changed_fields(base, params)
            if base and differs == []:
                self.settings.update(params=params.changed(), last_preset=base, changed_from=None)
            else:
                self.settings.update(params=params.changed(), last_preset=None,
                                     changed_from=base if differs is not None else None)
        return Edited(params, resolved.messages, changed)

    def changed_fields(self, preset: str | None, params: SamplingParams) -> list[str] | None:
        """The parameters whose values in ``params`` differ from preset ``preset``'s (None: no such preset)."""
        if not preset:
            return None
        try:
            base = self.presets.get(preset).params.to_dict()
        except (PresetError, InvalidName):
            return None
        return [name for name, value in params.to_dict().items() if base[name] != value]

    def preset_line(self, shown: str | None) -> str:
        """The line under the preset's name: why a built-in preset has no Delete, or, with none shown, that the
        values are custom and what was changed from which preset ("" for the user's own preset)."""
        if shown:
            return "" if self.presets.is_own(shown) else BUILT_IN.format(shown)
        base = self.settings.get().changed_from
        differs = self.changed_fields(base, self.saved()[0])
        if base and differs:
            return (f"Custom values: changed from '{base}': {', '.join(differs)}. Choose a preset to use its values, "
                    "or save these under a name.")
        return "Custom values (no preset). Save them under a name to keep them."

    def saved(self) -> tuple[SamplingParams, str | None, str]:
        """(parameters, preset name or None, note): what the page shows on (re)load.

        The parameters the page last had; on a fresh install, the last preset's. A
        saved preset or saved values that no longer apply fall back to neutral and the
        note says why, instead of sampling differently without a word.
        """
        s = self.settings.get()
        if s.params is not None:
            try:
                return SamplingParams.from_dict(s.params, source="the saved parameters"), s.last_preset, ""
            except InvalidParameter as exc:
                return SamplingParams(), None, f"The saved parameters could not be used ({exc}); showing neutral."
        if not s.last_preset:
            return SamplingParams(), None, ""
        try:
            return self.presets.get(s.last_preset).params, s.last_preset, ""
        except (PresetError, InvalidName) as exc:
            return SamplingParams(), None, f"Preset '{s.last_preset}' could not be applied ({exc}); showing neutral."

    def use(self, params: SamplingParams) -> SamplingParams:
        """Make ``params`` the current parameters (e.g. a chat's own), as if they had been set by hand."""
        self.settings.update(params=params.changed(), last_preset=None, changed_from=None)
        return params

    def apply(self, name: str) -> Preset:
        try:
            chosen = self.presets.get(name)
        except (PresetError, InvalidName) as exc:
            raise UserError(str(exc)) from exc
        self.settings.update(last_preset=chosen.name, params=chosen.params.changed(), changed_from=None)
        return chosen

    def neutral(self) -> SamplingParams:
        self.settings.update(last_preset=None, params={}, changed_from=None)
        return SamplingParams()

    def save(self, name: str, params: SamplingParams) -> str:
        """Save ``params`` as a user preset; the name as saved."""
        try:
            self.presets.save(name or "", params)
        except (InvalidName, OSError) as exc:
            raise UserError(f"Could not save the preset: {exc}") from exc
        self.settings.update(last_preset=name.strip(), changed_from=None)
        return name.strip()

    def delete(self, name: str | None) -> None:
        if not name:
            raise UserError("Choose a preset to delete first.")
        try:
            self.presets.delete(name)
        except (PresetError, InvalidName) as exc:
            raise UserError(str(exc)) from exc
        if self.settings.get().last_preset == name:
            self.settings.update(last_preset=None)
        if self.settings.get().changed_from == name:
            self.settings.update(changed_from=None)
