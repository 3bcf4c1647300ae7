"""Load options: each loader declares its own once, the way sampling parameters are declared.

A loader's ``options`` is a tuple of :class:`LoadOption` (name, type, bounds or choices,
default, one-line help, the devices a non-default value needs). The Model tab builds its
form from it, ``launch.py --load-option NAME=VALUE`` and the API's admin model-load endpoint
read values through it, and the values chosen are remembered per model and written into
reproduce records. :func:`check_options` is the one place a value is read and checked: an
unknown name, a value of the wrong type or out of range, is refused with a message that
names the option and what it takes; :func:`refuse_off_device` refuses a value that does
not apply where the model is loaded (GPU layers without a GPU), never ignoring it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from loaders.base import ModelLoadError


class LoadOptionError(ModelLoadError):
    """A load option has an unknown name or a bad value; ``option`` names it."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class LoadOption:
    name: str
    kind: type
    """int, float, bool or str."""
    default: Any
    help: str
    label: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    """Where a value other than the default applies ("cuda"); empty: everywhere the loader runs."""

    @property
    def title(self) -> str:
        return self.label or self.name.replace("_", " ")

    def describe(self) -> str:
        """What the option takes, as an error message or a help line says it."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "true or false"
        kind = "an integer" if self.kind is int else "a number" if self.kind is float else "text"
        low, high = (v if v is None or self.kind is float else int(v) for v in (self.minimum, self.maximum))
        if low is not None and high is not None:
            return f"{kind} from {low} to {high}"
        if low is not None:
            return f"{kind} >= {low}"
        return kind

    def parse(self, value: Any, loader: str = "") -> Any:
        """``value`` (typed, or text from a command line or a form) as this option's type, checked."""
        where = f"{loader} load option '{self.name}'" if loader else f"load option '{self.name}'"
        bad = LoadOptionError(self.name, f"{where} takes {self.describe()}; got {value!r}")
        if value is None:
            return self.default
        if self.kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise bad
        if self.kind in (int, float):
            if isinstance(value, bool):
                raise bad
            try:
                number = self.kind(str(value).strip()) if isinstance(value, str) else value
                if self.kind is int and (isinstance(number, float) and not number.is_integer()):
                    raise ValueError
                number = self.kind(number)
            except (TypeError, ValueError):
                raise bad from None
            if (self.minimum is not None and number < self.minimum) or \
                    (self.maximum is not None and number > self.maximum):
                raise bad
            return number
        if not isinstance(value, str):
            raise bad
        text = value.strip()
        if self.choices and text not in self.choices:
            raise bad
        return text


def options_of(loader: Any) -> tuple[LoadOption, ...]:
    return tuple(loader.options)


def check_options(loader: Any, values: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every option of ``loader`` with its value: the given ones read and checked, the others their defaults.
    A name the loader does not have is refused, with the names it has."""
    specs = {o.name: o for o in options_of(loader)}
    for name in values or {}:
        if name not in specs:
            known = ", ".join(specs) or "none"
            raise LoadOptionError(name, f"the {loader.name} loader has no load option '{name}' (its options: "
                                        f"{known})")
    given = values or {}
    return {name: spec.parse(given.get(name), loader.name) for name, spec in specs.items()}


def changed(loader: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """The values that differ from their defaults (what a record or a remembered setting keeps)."""
    specs = {o.name: o for o in options_of(loader)}
    return {k: v for k, v in values.items() if k in specs and v != specs[k].default}


def refuse_off_device(loader: Any, values: Mapping[str, Any], device: str, why: str = "") -> None:
    """Refuse a non-default value of an option that needs another device than ``device``."""
    for spec in options_of(loader):
        value = values.get(spec.name, spec.default)
        if spec.devices and value != spec.default and not any(device.startswith(d) for d in spec.devices):
            reason = f" ({why})" if why else ""
            raise LoadOptionError(spec.name, f"{loader.name} load option {spec.name}={value} needs a "
                                             f"{' or '.join(d.upper() for d in spec.devices)} device, but this load "
                                             f"runs on {device}{reason}; set {spec.name} back to {spec.default!r}")


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """``["n_ctx=4096", "flash_attn=on"]`` -> {"n_ctx": "4096", "flash_attn": "on"} (values read later)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise LoadOptionError(item, f"a load option is NAME=VALUE (e.g. n_ctx=4096); got {item!r}")
        out[name.strip()] = value.strip()
    return out


def help_table(loader: Any) -> str:
    """One line per option: name, what it takes, default, help (for --help and the user guide)."""
    return "\n".join(f"  {o.name} ({o.describe()}; default {o.default!r}): {o.help}" for o in options_of(loader))
