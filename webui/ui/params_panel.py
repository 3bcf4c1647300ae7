"""Sampling controls built from SamplingParams' own metadata, so bounds live in one place."""

from __future__ import annotations

import json
from typing import Any

import gradio as gr

from webui.engine.params import InvalidParameter, SamplingParams, param_fields

NUMBER_FIELD_ABOVE = 1000  # int ranges wider than this get a number box, not an unusable slider


def build_param_components(initial: SamplingParams | None = None) -> dict[str, gr.components.Component]:
    """One component per SamplingParams field, in declaration order, elem ids "params-<name>"."""
    components: dict[str, gr.components.Component] = {}
    values = values_from_params(initial or SamplingParams())
    for (name, _, spec, help_text), default in zip(param_fields(), values):
        common = dict(label=name, info=help_text, elem_id=f"params-{name}")
        if name == "stop":
            components[name] = gr.Textbox(value=default, lines=2, placeholder=r"one per line; \n for a newline",
                                          **common)
        elif name == "logit_bias":
            components[name] = gr.Textbox(value=default, lines=1, placeholder='{"token id": bias}, e.g. {"2": -100}',
                                          **common)
        elif name == "ban_eos":
            components[name] = gr.Checkbox(value=default, **common)
        elif name == "seed":
            components[name] = gr.Number(value=default, precision=0, **common)
        elif spec.kind is int and (spec.maximum or 0) > NUMBER_FIELD_ABOVE:
            components[name] = gr.Number(value=default, precision=0, minimum=spec.minimum, maximum=spec.maximum,
                                         **common)
        else:
            lo = spec.minimum + spec.step if spec.min_exclusive else spec.minimum
            components[name] = gr.Slider(minimum=lo, maximum=spec.maximum, step=spec.step, value=default,
                                         **common)
    return components


def params_from_values(values: dict[str, Any]) -> SamplingParams:
    """SamplingParams from the components' current values (raises InvalidParameter)."""
    v = dict(values)
    v["stop"] = [s.replace("\\n", "\n").replace("\\t", "\t") for s in (v.get("stop") or "").splitlines() if s]
    v["logit_bias"] = _parse_bias(v.get("logit_bias") or "")
    seed = v.get("seed")
    v["seed"] = None if seed in (None, "", -1) else int(seed)
    return SamplingParams.from_dict(v)


def _parse_bias(text: str) -> dict:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise InvalidParameter("logit_bias", f'logit_bias must be JSON like {{"2": -100}}, got {text!r}', text)
    if not isinstance(value, dict):
        raise InvalidParameter("logit_bias", f'logit_bias must be JSON like {{"2": -100}}, got {text!r}', text)
    return value


def values_from_params(params: SamplingParams) -> list[Any]:
    """Component values for ``params``, in the order of build_param_components()."""
    d = params.to_dict()
    out = []
    for name, *_ in param_fields():
        if name == "stop":
            out.append("\n".join(s.replace("\n", "\\n").replace("\t", "\\t") for s in d["stop"]))
        elif name == "seed":
            out.append(-1 if d["seed"] is None else d["seed"])
        elif name == "logit_bias":
            out.append(json.dumps(d["logit_bias"]) if d["logit_bias"] else "")
        else:
            out.append(d[name])
    return out
