"""A provider with tools, run by promptfoo 0.115 itself against our API and by our batch runner, agrees (#32).

The same config runs twice: promptfoo's openai chat provider sends the tools to our /v1/chat/completions (the
default model, tool_choice required, seeded) and reads the reply as it reads OpenAI's; our batch runner offers
the same tools to the same model in-process. The prompt is rendered the same way (webui.chat.tools), the same
seed draws the same tokens, so both see the same call; the output promptfoo gives (the tool_calls list) and
ours must be the same calls, and every assert (is-valid-openai-tools-call with the provider's tools, javascript
on ``output[0]``, contains on the compact JSON) must give the same pass/fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.api.conftest import start_api
from tests.e2e.promptfoo_cli import promptfoo_eval
from tests.engine.test_batch_runner import run
from tests.engine.test_batch_tools import WEATHER
from webui.batch.run.grid import GridSpec
from webui.batch.promptfoo.reader import read_suite
from webui.batch.run.runner import BatchJob

pytestmark = pytest.mark.node

CONFIG = """description: tools agreement
prompts: ['What is the weather in {{city}}? Call the tool.']
providers:
  - id: openai:chat:SmolLM2-135M-Instruct
    label: local
    config: {apiBaseUrl: BASE, apiKey: unused, tools: file://tools.yaml, tool_choice: required,
             temperature: 0.0001, seed: 7, max_tokens: 60}
tests:
  - vars: {city: Paris}
    assert: &checks
      - type: is-valid-openai-tools-call
      - {type: javascript, value: "output[0].function.name === 'get_weather'"}
      - {type: javascript, value: "JSON.parse(output[0].function.arguments).city.length > 0"}
      - {type: contains, value: '"type":"function"'}
      - {type: icontains, value: paris}
  - vars: {city: Tokyo}
    assert: *checks
"""


def _calls(output: object) -> list[tuple[str, dict]]:
    """(name, arguments) of each call in a tools output (promptfoo's list, or our JSON of it)."""
    listed = json.loads(output) if isinstance(output, str) else output
    assert isinstance(listed, list), output
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in listed]


def test_promptfoo_and_the_batch_runner_give_the_same_calls_and_verdicts(tmp_path_factory, services,
                                                                         default_model_dir, tmp_path: Path):
    (tmp_path / "tools.yaml").write_text(json.dumps([WEATHER]), encoding="utf-8")
    context, base, _ = start_api(tmp_path_factory, default_model_dir, key=None)
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(CONFIG.replace("BASE", base), encoding="utf-8")
    with context:
        theirs = sorted(promptfoo_eval(config, tmp_path / "home")["results"]["results"], key=lambda r: r["testIdx"])
    assert 2 not in [r["failureReason"] for r in theirs], theirs[0].get("error")  # 2: the provider failed

    services.models.load(services.models.catalog.entry_for_path(default_model_dir))
    suite = read_suite(config.read_text(encoding="utf-8"), tmp_path)
    rows = run(services, BatchJob("tools", suite.rows, GridSpec([], {}), settings=suite.settings)).rows()
    assert [_calls(r.output) for r in rows] == [_calls(t["response"]["output"]) for t in theirs]
    ours = [[a.passed for a in r.asserts] for r in rows]
    assert ours == [[c["pass"] for c in t["gradingResult"]["componentResults"]] for t in theirs]
    assert all(verdicts[:4] == [True] * 4 for verdicts in ours), ours  # a call of get_weather, whatever its city
