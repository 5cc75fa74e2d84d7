"""vitviz.app.access: which requests come from the app's own pages, and which need no login (the served app's
guard is tested in test_serve.py)."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from vitviz.app.access import from_own_page, needs_no_login


@pytest.mark.parametrize(
    "headers, own",
    [
        ({"host": "127.0.0.1:7860"}, True),  # no page at all: a script, gradio_client
        ({"host": "127.0.0.1:7860", "origin": "http://127.0.0.1:7860"}, True),
        ({"host": "school.example", "origin": "https://SCHOOL.example"}, True),  # the default port, any case
        ({"host": "127.0.0.1:7860", "origin": "http://127.0.0.1:7861"}, False),  # another local app
        ({"host": "127.0.0.1:7860", "origin": "http://localhost:7860"}, False),  # another name is another origin
        ({"host": "127.0.0.1:7860", "origin": "null"}, False),  # a sandboxed frame, a file
        ({"host": "127.0.0.1:7860", "origin": "https://e.example"}, False),
        # behind a proxy (a share link's tunnel) that says which host it was asked as
        ({"host": "127.0.0.1:7860", "x-forwarded-host": "abc.gradio.live", "origin": "https://abc.gradio.live"}, True),
    ],
)
def test_a_request_comes_from_the_apps_own_page_when_its_origin_names_the_host_it_asks(headers, own):
    assert from_own_page(Headers(headers)) is own


OPEN = [("GET", "/"), ("POST", "/login"), ("GET", "/assets/index.js"), ("GET", "/theme.css")]
OPEN += [("GET", "/gradio_api/startup-events")]
GUARDED = [("GET", "/config"), ("POST", "/assets/x"), ("GET", "/gradio_api/heartbeat/s"), ("GET", "/gradio_api/info")]
GUARDED += [("POST", "/gradio_api/cancel"), ("GET", "/vitviz/explorer/layer"), ("GET", "/gradio_api/file=x")]
GUARDED += [("POST", "/gradio_api/upload")]


def test_only_the_login_page_its_assets_and_gradios_own_start_up_call_need_no_login():
    assert all(needs_no_login(method, path) for method, path in OPEN)
    assert not any(needs_no_login(method, path) for method, path in GUARDED)
