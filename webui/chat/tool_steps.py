"""What a reply that called tools keeps (#44): each turn that called tools (a :class:`ToolStep`: the model's text
and its calls) and each call as it ran (a :class:`CallRecord`: arguments, result, time, error). Stored with the
reply (its record's ``tool_steps``), and turned back into the history the model reads by :func:`history_of`.
No engine here: the store reads these.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CallRecord:
    """One call as it ran: what the model asked and what came back."""

    id: str
    name: str
    arguments: str
    """The arguments as JSON text, as the model wrote them (or as a person edited them)."""
    result: str = ""
    """What went back to the model ("error: ..." for a call that failed)."""
    error: str | None = None
    seconds: float = 0.0
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallRecord:
        return cls(str(data["id"]), str(data["name"]), str(data["arguments"]), str(data.get("result", "")),
                   None if data.get("error") is None else str(data["error"]), float(data.get("seconds", 0.0)),
                   bool(data.get("truncated", False)))


@dataclass
class ToolStep:
    """One turn that called tools: the text the model wrote besides its calls, and the calls."""

    text: str
    calls: list[CallRecord] = field(default_factory=list)
    constrained: str = ""
    """How the turn's output was held ("" where it was not): a grammar of the offered tools' calls."""
    tokens: list[dict[str, Any]] = field(default_factory=list)
    """The turn's token view rows (webui.token_view.token_rows), where they were kept."""

    def messages(self) -> list[dict[str, Any]]:
        """The step as the model reads it in the history: its calls, then each call's result."""
        calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                 for c in self.calls]
        return [{"role": "assistant", "content": self.text or None, "tool_calls": calls},
                *({"role": "tool", "tool_call_id": c.id, "content": c.result} for c in self.calls)]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "calls": [c.to_dict() for c in self.calls]}
        if self.constrained:
            out["constrained"] = self.constrained
        if self.tokens:
            out["tokens"] = list(self.tokens)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolStep:
        rows = data.get("tokens")
        return cls(str(data.get("text", "")), [CallRecord.from_dict(c) for c in data.get("calls", [])],
                   str(data.get("constrained") or ""),
                   [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else [])


def history_of(steps: list[ToolStep]) -> list[dict[str, Any]]:
    """Every step's messages, in order."""
    return [m for step in steps for m in step.messages()]
