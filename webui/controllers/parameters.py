"""ParametersController: the Parameters tab's behaviour (the controls' values, presets, what is remembered).

The controls hold plain values (numbers, a checkbox, text for stop strings,
logit_bias and the other list parameters); ``params_from_values`` turns them into SamplingParams and names
the parameter and its range when one is wrong, the moment it is typed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from webui.controllers.errors import UserError
from webui.engine.params import InvalidParameter, ParamSpec, SamplingParams, specs
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
    return None if value == "" else value


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


def user_error(exc: InvalidParameter) -> UserError:
    return UserError(f"Parameters tab: {exc}")


def field_text(name: str) -> str:
    """A control's own line under its label: the parameter's help (and range, for a number box)."""
    spec = specs()[name]
    return f"{spec.help} {spec.range_text()}" if spec.widget == "number" else spec.help


def slider_end(name: str, value: Any) -> float | None:
    """Where a slider goes when its box is left holding a value out of its range (its nearer end) or nothing (its
    low end): the page moves it there, so that is the value used; None for a value in range or another control."""
    spec = specs()[name]
    if spec.widget != "slider" or isinstance(value, bool) or not isinstance(value, (int, float, type(None))):
        return None
    low, high, _ = slider_range(spec)
    if value is None or value < low:
        return low
    return high if value > high else None


def slider_range(spec: ParamSpec) -> tuple[float, float, float]:
    """A slider's own (low end, high end, step): the spec's bounds, the low one a step in where it is excluded."""
    if spec.minimum is None or spec.maximum is None or spec.step is None:
        raise TypeError(f"a slider needs a minimum, maximum and step: {spec}")
    low = spec.minimum + spec.step if spec.min_exclusive else spec.minimum
    return low, spec.maximum, spec.step


@dataclass(frozen=True)
class Edited:
    """What became of one control's change: the parameters now kept (None: nothing was saved) and the message
    shown beside that control ("" when its value is right)."""

    params: SamplingParams | None
    message: str = ""
    changed: bool = False
    """Whether the kept parameters differ from those saved before (the preset no longer describes them)."""


class ParametersController:
    def __init__(self, services: Services) -> None:
        self.services, self.presets, self.settings = services, services.presets, services.settings

    def current(self, values: dict[str, Any], changed: str | None = None) -> SamplingParams:
        """The controls' values as SamplingParams; UserError names the parameter, its range and the tab
        (the ``changed`` one first, when it is wrong too: the control the user just touched)."""
        try:
            if changed is not None:
                params_from_values({changed: values[changed]})
            return params_from_values(values)
        except InvalidParameter as exc:
            raise user_error(exc) from exc

    def edit(self, values: dict[str, Any], name: str) -> Edited:
        """Check and keep the controls' values after the user changed control ``name``. A wrong value is kept
        out (the last good one stays saved) and named beside its control with what it takes; a number typed
        past a slider's end is used at that end (where the slider moves), and the message says so."""
        value, spec = values[name], specs()[name]
        try:
            if value is None and spec.widget == "number" and getattr(SamplingParams(), name) is not None:
                raise InvalidParameter(name, f"type a number in {spec.range_text()} (the box is empty or holds no "
                                             "number)", value)  # (an empty seed box means "random")
            params_from_values({name: value})
            moved = ""
        except InvalidParameter as exc:
            end = slider_end(name, value)
            if end is None:
                kept = _to_control(spec, self.saved()[0].to_dict()[name])
                still = f"; {kept!r} stays saved" if kept not in (None, "") else ""
                return Edited(None, f"⚠ {exc}. Not used{still}: correct it (Send asks for that first).")
            values = {**values, name: end}
            typed = "The box is empty" if value is None else f"{value:g} is outside {spec.range_text()}"
            moved = f"⚠ {typed}: the slider goes to {end:g}, and {end:g} is used."
        try:
            params = params_from_values(values)
        except InvalidParameter as exc:
            return Edited(None, f"⚠ Not saved yet: {exc.param} is wrong (its message is beside it).")
        changed = params.changed() != self.settings.get().params  # not a value typed back, say
        if changed:
            self.settings.update(params=params.changed(), last_preset=None)
        return Edited(params, moved, changed)

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
        self.settings.update(params=params.changed(), last_preset=None)
        return params

    def apply(self, name: str) -> Preset:
        try:
            chosen = self.presets.get(name)
        except (PresetError, InvalidName) as exc:
            raise UserError(str(exc)) from exc
        self.settings.update(last_preset=chosen.name, params=chosen.params.changed())
        return chosen

    def neutral(self) -> SamplingParams:
        self.settings.update(last_preset=None, params={})
        return SamplingParams()

    def save(self, name: str, params: SamplingParams) -> str:
        """Save ``params`` as a user preset; the name as saved."""
        try:
            self.presets.save(name or "", params)
        except (InvalidName, OSError) as exc:
            raise UserError(f"Could not save the preset: {exc}") from exc
        self.settings.update(last_preset=name.strip())
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
