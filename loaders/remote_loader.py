"""The remote loader: any OpenAI-compatible server (vLLM, llama.cpp's server, TGI, another workbench).

A remote server returns text, not logits, so this backend generates whole
requests (``capabilities.text_only``): the engine relays its stream instead of
stepping it. The engine hands it the sampling parameters already as OpenAI
request fields (``SamplingParams.api_body``: vLLM's extras only when they differ
from neutral, so strict servers are not sent fields they reject).
Chats go to /v1/chat/completions as messages (the server applies its own chat
template); raw prompts go to /v1/completions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, Sequence

from loaders.base import BaseLoader, Capabilities, LoaderError, LoadOptions, ModelLoadError, Progress, TextBackend


if TYPE_CHECKING:
    import httpx


class RemoteError(LoaderError):
    """The remote server could not be reached, refused the request, or timed out."""


def register_loaders(register: Callable[[Any], None]) -> None:
    register(RemoteLoader())


@dataclass
class RemoteChunk:
    text: str = ""
    finish_reason: str | None = None
    usage: dict | None = None
    logprobs: list[tuple[str, float, list[tuple[str, float]]]] = field(default_factory=list)


class RemoteTokenizer:
    """No local tokenizer: chats are sent as messages and the server applies its own template."""

    eos_token_ids: frozenset[int] = frozenset()
    chat_template: str | None = "(the server's own)"  # it has one: the server applies it to the messages

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        raise LoaderError("a remote model has no local tokenizer; token ids are not available")

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        raise LoaderError("a remote model has no local tokenizer; token ids are not available")

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None) -> str:
        """A readable transcript (for display); what is sent is the messages themselves."""
        text = "".join(f"<{m['role']}>\n{m['content']}\n" for m in messages)
        return text + ("<assistant>\n" if add_generation_prompt else "")

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return []


class RemoteLoader(BaseLoader):
    name = "remote"
    description = "A remote OpenAI-compatible server (vLLM, llama.cpp server, TGI, another workbench)"
    capabilities = Capabilities(batched_forward=False, lora=False, logprobs=True, devices=("remote",),
                                formats=("openai-api",), text_only=True)
    requires = ("httpx",)
    install_hint = "pip install httpx"
    takes_dtype = False  # the server runs the model as it chose

    def match(self, path: Path) -> int:
        return 0  # chosen by URL, not by a file

    def prepare(self, path: Path, workdir: Path, progress: Progress | None = None) -> Path:
        return path

    def load(self, path: Path, options: LoadOptions, progress: Progress | None = None) -> "RemoteModel":
        raise ModelLoadError("the remote loader connects to a server URL; use the Model tab's Remote server "
                             "section or --model http://HOST:PORT/v1 --loader remote")

    def connect(self, base_url: str, api_key: str | None = None, model: str | None = None,
                timeout: float = 600.0) -> "RemoteModel":
        return RemoteModel(base_url, api_key, model, timeout)


class RemoteModel:
    loader = "remote"
    capabilities = RemoteLoader.capabilities
    device, dtype = "remote", "remote"
    vocab_size = 0

    def __init__(self, base_url: str, api_key: str | None, model: str | None, timeout: float = 600.0):
        import httpx

        if not base_url.startswith(("http://", "https://")):
            raise ModelLoadError(f"a remote server URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.load_options: dict[str, Any] = {}  # a server has no load options of ours
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers,
                                  timeout=httpx.Timeout(timeout, connect=10.0))
        listed = self._get_models()
        if model is None:
            if not listed:
                raise ModelLoadError(f"the server at {self.base_url} lists no models; name one")
            model = listed[0]["id"]
        elif listed and model not in {m["id"] for m in listed}:
            raise ModelLoadError(f"the server at {self.base_url} has no model '{model}'; it has: "
                                 f"{', '.join(m['id'] for m in listed)}")
        info = next((m for m in listed if m["id"] == model), {})
        self.name, self.path = model, Path(self.base_url)
        self.server_model = model  # the server's id for it (``name`` is what the workbench calls it)
        self.context_length = int(info.get("max_model_len") or 0)  # vLLM says; others do not
        self.tokenizer = RemoteTokenizer()

    def _get_models(self) -> list[dict]:
        import httpx

        try:
            r = self._http.get("/models")
        except httpx.HTTPError as exc:
            raise ModelLoadError(f"could not reach the remote server at {self.base_url}: {exc} (is it running, and "
                                 "does the URL end in /v1?)") from exc
        if r.status_code == 401:
            raise ModelLoadError(f"the server at {self.base_url} refused the API key (401); check it")
        if r.status_code != 200:
            raise ModelLoadError(f"the server at {self.base_url} answered {r.status_code} to GET /models: "
                                 f"{r.text[:300]}")
        return list(r.json().get("data", []))

    def request_body(self, prompt: str | list[int], messages: list[dict] | None, fields: dict[str, Any],
                     logprobs: int | None) -> tuple[str, dict]:
        """(route, body); ``fields``: the sampling parameters as request fields."""
        body: dict[str, Any] = {"model": self.server_model, "stream": True, "stream_options": {"include_usage": True},
                                **fields}
        if messages is not None:
            body["messages"] = messages
            if logprobs is not None:
                body["logprobs"], body["top_logprobs"] = True, logprobs
            return "/chat/completions", body
        body["prompt"] = prompt
        if logprobs is not None:
            body["logprobs"] = logprobs
        return "/completions", body

    def stream(self, prompt: str | list[int], messages: list[dict] | None, fields: dict[str, Any],
               logprobs: int | None, cancelled: Callable[[], bool]) -> Iterator[RemoteChunk]:
        """The server's answer as chunks; stops reading (closing the connection) when ``cancelled()``."""
        import httpx

        route, body = self.request_body(prompt, messages, fields, logprobs)
        try:
            with self._http.stream("POST", route, json=body) as r:
                if r.status_code != 200:
                    r.read()
                    raise RemoteError(f"the remote server answered {r.status_code}: {_error_text(r)}")
                for line in r.iter_lines():
                    if cancelled():
                        return
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    yield _chunk(json.loads(data), chat=messages is not None)
        except httpx.TimeoutException as exc:
            raise RemoteError(f"the remote server at {self.base_url} timed out: {exc}") from exc
        except httpx.HTTPError as exc:
            raise RemoteError(f"lost the connection to the remote server at {self.base_url}: {exc}") from exc

    def new_cache(self, loras: tuple[tuple[str, float], ...] = ()) -> Any:
        raise LoaderError("a remote model generates whole requests; it has no per-step cache")

    def forward(self, caches: Sequence[Any], new_ids: Sequence[Sequence[int]]) -> NoReturn:
        raise LoaderError("a remote model generates whole requests; it has no forward step")

    def release(self, cache: Any) -> None:
        pass

    def memory_bytes(self) -> int:
        return 0

    def close(self) -> None:
        self._http.close()


def _error_text(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", {}).get("message") or response.text[:300])
    except ValueError:
        return response.text[:300]


def _chunk(data: dict, chat: bool) -> RemoteChunk:
    if "error" in data:
        raise RemoteError(f"the remote server reported an error: {data['error'].get('message', data['error'])}")
    out = RemoteChunk(usage=data.get("usage"))
    for choice in data.get("choices") or []:
        if chat:
            out.text += (choice.get("delta") or {}).get("content") or ""
            for item in ((choice.get("logprobs") or {}).get("content") or []):
                out.logprobs.append((item["token"], item["logprob"],
                                     [(t["token"], t["logprob"]) for t in item.get("top_logprobs", [])]))
        else:
            out.text += choice.get("text") or ""
            lp = choice.get("logprobs") or {}
            for token, value, top in zip(lp.get("tokens", []), lp.get("token_logprobs", []),
                                         lp.get("top_logprobs") or [{}] * len(lp.get("tokens", []))):
                out.logprobs.append((token, value, list((top or {}).items())))
        out.finish_reason = choice.get("finish_reason") or out.finish_reason
    return out


if TYPE_CHECKING:  # the type checker holds the model to what its capabilities promise
    def _promises(model: RemoteModel) -> TextBackend:
        return model
