"""Finding a server: the URL given, or the usual local ports; which API answers (each API's
`identify_path`, in the order of APIS) and what it serves."""

from __future__ import annotations

from dataclasses import replace

from ggprof.engines.server.apis import APIS, Server
from ggprof.engines.server.client import Client, Endpoint, ServerError, reachable
from ggprof.errors import BadInputError

# (port, kind) where each server listens by default, in the order they are tried
DEFAULT_PORTS = ((11434, "ollama"), (8080, "llama-server"), (1234, "lm-studio"))


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
    """Which API answers, and what it serves. BadInputError when it is none of them."""
    for api in APIS.values():
        try:
            answer = client.get_json(api.identify_path, timeout_s=5.0)
        except ServerError:
            continue
        server = api.make(endpoint, client, answer, model_name)
        if server is not None:
            return replace(server, found=f"{server.title()} ({found})")
    paths = ", ".join(api.identify_path for api in APIS.values())
    raise BadInputError(
        f"--server {endpoint}: not llama-server, Ollama, LM Studio or an OpenAI-compatible server "
        f"(none of {paths} answered as they do)"
    )
