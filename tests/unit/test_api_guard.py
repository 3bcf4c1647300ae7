"""The API's outer guard: an error no handler maps is a 500 in OpenAI's error shape (never a bare text page), and
a body over the limit is a 413 before the route reads it."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI, Request

from tests.conftest import run_async
from webui.api.app import Guard
from webui.api.errors import install_error_handlers


def app_with(limit: int | None) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    read = []

    @app.post("/boom")
    async def boom(request: Request):
        read.append(len(await request.body()))
        raise RuntimeError("a bug")

    @app.post("/echo")
    async def echo(request: Request):
        body = await request.body()
        read.append(len(body))
        return {"bytes": len(body)}

    app.add_middleware(Guard, max_body_bytes=limit)
    app.state.read = read
    return app


async def post(app: FastAPI, path: str, content) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.post(path, content=content)


def test_an_unmapped_error_is_a_500_in_openais_shape(caplog):
    r = run_async(post(app_with(None), "/boom", b"{}"))
    assert r.status_code == 500
    assert r.json() == {"error": {"message": "internal server error: RuntimeError (the server's log has the details)",
                                  "type": "server_error", "param": None, "code": None}}
    assert "a bug" in caplog.text  # the traceback goes to the log, not to the client


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_limit_is_refused_before_the_route_has_it(chunked):
    app = app_with(1000)
    body = b"x" * 5000
    async def pieces():
        for i in range(0, len(body), 100):
            yield body[i:i + 100]

    r = run_async(post(app, "/echo", pieces() if chunked else body))
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert app.state.read == []
    assert run_async(post(app, "/echo", b"y" * 1000)).json() == {"bytes": 1000}
