"""The UI takes no upload larger than the largest a tab reads (a training dataset, 256 MB): a 1 GB upload is cut
off while it arrives, with a 413 that says the limit, and the server goes on serving (#43)."""

from __future__ import annotations

import http.client
import time
import urllib.request
from urllib.parse import urlparse

import pytest

from webui.training.data import MAX_DATASET_BYTES

pytestmark = [pytest.mark.browser]


def test_a_1_gb_upload_is_cut_off_at_the_limit(server):
    url = urlparse(server.url)
    boundary = "hostile-upload"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.jsonl\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    size = 2**30

    def body():
        yield head
        chunk = b"\0" * 2**20
        for _ in range(size // len(chunk)):
            yield chunk

    started = time.monotonic()
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    try:
        try:
            connection.request("POST", "/gradio_api/upload", body=body(), encode_chunked=False,
                               headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                                        "Content-Length": str(size + len(head))})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and stopped reading before the rest went out: its answer is there to read
        answer = connection.getresponse()
        status, text = answer.status, answer.read().decode(errors="replace")
    finally:
        connection.close()
    assert status == 413 and f"maximum allowed size of {MAX_DATASET_BYTES} bytes" in text
    assert time.monotonic() - started < 60
    with urllib.request.urlopen(server.url + "/health", timeout=30) as r:
        assert r.status == 200
