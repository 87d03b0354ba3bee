"""Finding a server: the URL given, or the usual local ports; which API answers (each API's
`identify_path`, in the order of APIS) and what it serves."""

from __future__ import annotations

import time
from dataclasses import replace

from ggprof.engines.server.apis import APIS, Server
from ggprof.engines.server.client import Client, Endpoint, ServerError, reachable
from ggprof.errors import BadInputError

# (port, kind) where each server listens by default, in the order they are tried
DEFAULT_PORTS = ((11434, "ollama"), (8080, "llama-server"), (1234, "lm-studio"))
# llama-server answers 503 {"error": {"message": "Loading model"}} until its model is loaded
# (recorded: tests/data/servers/llama-server-loading.json); a large model loads in a minute
LOADING_WAIT_S = 60.0
LOADING_POLL_S = 1.0


def find_server(url: str | None, read_timeout_s: float, model_name: str | None = None) -> Server:
    """The server at `url`, or the first one on the usual local ports; BadInputError naming what
    was tried when there is none."""
    if url:
        endpoint = Endpoint.parse(url)
        if not reachable(endpoint):
            raise BadInputError(f"--server {endpoint}: nothing accepts connections there")
        return identify(endpoint, Client(endpoint, read_timeout_s), model_name, found="the URL given")
    tried = []
    for port, kind in DEFAULT_PORTS:
        endpoint = Endpoint("http", "127.0.0.1", port, "")
        title = APIS[kind].title
        tried.append(f"{title} :{port}")
        if reachable(endpoint, 0.5):
            return identify(endpoint, Client(endpoint, read_timeout_s), model_name, found=f"on {title}'s port {port}")
    raise BadInputError(f"--server: no server on the usual local ports ({', '.join(tried)}): give its URL")


def identify(endpoint: Endpoint, client: Client, model_name: str | None, found: str) -> Server:
    """Which API answers, and what it serves. A server answering 503 (llama-server while it
    loads its model) is waited for, at most LOADING_WAIT_S; BadInputError when it is none of
    the APIs, ServerError when it is still loading after that."""
    deadline = time.monotonic() + LOADING_WAIT_S
    while True:
        loading = False
        for api in APIS.values():
            try:
                answer = client.get_json(api.identify_path, timeout_s=5.0)
            except ServerError as e:
                loading = loading or e.status == 503
                continue
            server = api.make(endpoint, client, answer, model_name)
            if server is not None:
                return replace(server, found=f"{server.title()} ({found})")
        if not loading:
            break
        if time.monotonic() + LOADING_POLL_S > deadline:
            raise ServerError(
                f"--server {endpoint}: still answers 503 (loading its model) after {LOADING_WAIT_S:.0f} s: "
                "run again once it has loaded"
            )
        time.sleep(LOADING_POLL_S)
    paths = ", ".join(api.identify_path for api in APIS.values())
    raise BadInputError(
        f"--server {endpoint}: not llama-server, Ollama, LM Studio or an OpenAI-compatible server "
        f"(none of {paths} answered as they do)"
    )
