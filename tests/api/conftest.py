"""A real workbench server with the API on, for the API tests (one per test module)."""

from __future__ import annotations

from dataclasses import dataclass


from tests.e2e.server import Server, free_port, running_server, user_data_with_default_model

API_KEY = "test-key-123"


@dataclass
class APIServer:
    base_url: str  # ends in /v1
    key: str | None
    server: Server

    @property
    def root(self) -> str:
        return self.base_url.removesuffix("/v1")


def start_api(tmp_path_factory, default_model_dir, *extra: str, key: str | None = API_KEY):
    """A server serving the API alone (--nowebui: the UI's build would add seconds to each start)."""
    user_data = user_data_with_default_model(tmp_path_factory.mktemp("api") / "data", default_model_dir)
    port = free_port()
    args = ["--nowebui", "--api-port", str(port), *(["--api-key", key] if key else []), *extra]
    return running_server(user_data, *args), f"http://127.0.0.1:{port}/v1", key
