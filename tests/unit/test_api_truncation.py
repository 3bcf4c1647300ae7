"""vLLM's truncate_prompt_tokens as our truncation_length."""

from __future__ import annotations


def test_truncate_prompt_tokens_becomes_a_truncation_length_that_leaves_room_for_the_reply():
    from webui.api.protocol import CompletionRequest
    from webui.api.serving import TRUNCATE_ALL, Serving

    serving = Serving.__new__(Serving)
    serving.services = type("S", (), {"presets": None})()
    cut = serving.sampling_params(CompletionRequest(prompt="hi", max_tokens=7, truncate_prompt_tokens=50))
    assert cut.truncation_length == 57
    assert serving.sampling_params(CompletionRequest(prompt="hi", truncate_prompt_tokens=-1)).truncation_length == \
        TRUNCATE_ALL
