"""ParametersController: the Parameters tab's behaviour (the controls' values, presets, what is remembered).

The controls hold plain values (numbers, a checkbox, text for stop strings,
logit_bias and the other list parameters); ``params_from_values`` turns them into SamplingParams and names
the parameter and its range when one is wrong, the moment it is typed.
"""

from __future__ import annotations

import json
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
    if widget == "json":
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
    if spec.widget == "json":
        return json.dumps(value) if value else ""
    if spec.widget == "text":
        return spec.to_text(value)
    if value is None:  # an alias stands for "not set" (seed -1)
        return next((alias for alias, meaning in spec.aliases if meaning is None), None)
    return value


def pipeline_text(params: SamplingParams) -> str:
    """The steps that run for ``params``, in order, and how the token is then chosen (Markdown)."""
    steps = " → ".join(f"`{name}`" for name in active_samplers(params))
    then = "the most likely token is taken (greedy)" if params.greedy else "a token is drawn"
    if not steps:
        return f"**Runs now:** nothing; {then} from the model's own distribution."
    return f"**Runs now, in order:** {steps}; then {then}."


def user_error(exc: InvalidParameter) -> UserError:
    return UserError(f"Parameters tab: {exc}")


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

    def remember(self, values: dict[str, Any]) -> SamplingParams:
        """Keep the values the user just set (the preset no longer describes them); UserError if one is wrong."""
        params = self.current(values)
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
