"""Who is on the other end: the server's address, identity, metrics endpoint and what it accepts.

Before any load, one GET of ``/v1/models`` tells an OpenAI-compatible server from anything else, and
one short streamed request finds which optional fields it accepts (``ignore_eos``/``min_tokens``,
``stream_options``), so that a strict server is not failed by a field it does not know.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import msgspec

from perfstack.errors import InputError, UsageError
from perfstack.loadtest import client, embed, scrape, workload
from perfstack.loadtest.client import Target

VERSION_HEADERS = ("server", "x-vllm-version", "x-sglang-version", "x-tgi-version", "x-powered-by")
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "embeddings": embed.PATH}


@dataclass
class Address:
    base: str  # scheme://host:port[/prefix] without credentials or a trailing /v1
    shown: str  # what the Run records


def address(url: str) -> Address:
    try:
        u = urlsplit(url if "://" in url else "http://" + url)
    except ValueError:  # an unclosed IPv6 bracket, '[::1'
        raise UsageError(f"not a valid URL: {url!r}", hint="e.g. perfstack loadtest http://[::1]:8000") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UsageError(f"not an http(s) URL: {url!r}", hint="e.g. perfstack loadtest http://127.0.0.1:8000")
    try:
        port = u.port
    except ValueError:
        raise UsageError(f"bad port in {url!r}") from None
    netloc = u.hostname if ":" not in u.hostname else f"[{u.hostname}]"
    netloc += f":{port}" if port else ""
    path = u.path.rstrip("/")
    for tail in ("/chat/completions", "/completions", "/models"):
        if path.endswith(tail):
            path = path[: -len(tail)]
    if path.endswith("/v1"):
        path = path[:-3]
    base = urlunsplit((u.scheme, netloc, path, "", ""))
    return Address(base=base, shown=base)


def headers(api_key_env: Optional[str]) -> dict[str, str]:
    """The Authorization header from the named environment variable (never printed or recorded)."""
    key = os.environ.get(api_key_env or "") if api_key_env else None
    return {"Authorization": f"Bearer {key}"} if key else {}


async def _get_json(session: aiohttp.ClientSession, url: str, hdrs: dict[str, str]) -> tuple[int, Any, dict[str, Any]]:
    async with session.get(url, headers={**hdrs, "Accept-Encoding": "identity"},
                           timeout=aiohttp.ClientTimeout(total=15)) as resp:
        raw = await resp.content.read(1 << 20)
        try:
            data = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            data = None
        return resp.status, data, {k.lower(): v for k, v in resp.headers.items()}


async def identify(session: aiohttp.ClientSession, addr: Address, hdrs: dict[str, str], model: Optional[str] = None,
                   notes: Optional[list[str]] = None) -> dict[str, Any]:
    """The server's identity from /v1/models, its headers and /version; an InputError when nothing
    OpenAI-compatible answers there. With ``model`` given, a broken /v1/models is only a note: some
    servers fail it while serving completions, and the probe request then decides."""
    url = addr.base + "/v1/models"
    try:
        status, data, h = await _get_json(session, url, hdrs)
    except aiohttp.ClientConnectorError as e:
        raise InputError(f"cannot reach {addr.shown}: {e.os_error or e}",
                         hint="is the server running, and is this its host and port?") from None
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        raise InputError(f"cannot reach {addr.shown}: {type(e).__name__}: {e}") from None
    if status in (401, 403):
        raise InputError(f"{url} answered HTTP {status}: the server wants an API key",
                         hint="put it in an environment variable and name it with --api-key-env")
    models = data.get("data") if isinstance(data, dict) else None
    if (status != 200 or not isinstance(models, list)) and model and status != 404:
        if notes is not None:
            notes.append(f"GET /v1/models answered HTTP {status}; going on with --model {client.excerpt(model)}")
        models = []
    elif status != 200 or not isinstance(models, list):
        raise InputError(f"{addr.shown} does not look like an OpenAI-compatible server "
                         f"(GET /v1/models answered HTTP {status}{'' if data is not None else ', not JSON'})",
                         hint="give the server's base URL, e.g. http://127.0.0.1:8000")
    ids = [i for m in models if isinstance(m, dict) and isinstance(i := m.get("id"), str)]
    secrets = client.credentials(hdrs)
    ident: dict[str, Any] = {"models": [client.excerpt(i, secrets) for i in ids[:20]]}
    for k in VERSION_HEADERS:
        if k in h:
            ident[k] = client.excerpt(h[k], secrets)
    try:
        status, data, _ = await _get_json(session, addr.base + "/version", hdrs)
        if status == 200 and isinstance(data, dict) and isinstance(data.get("version"), str):
            ident["version"] = client.excerpt(data["version"], secrets)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        pass
    if await scrape.fetch(session, addr.base + "/metrics", time.perf_counter()) is not None:
        ident["metrics"] = "/metrics"
    return ident


async def probe(session: aiohttp.ClientSession, target: Target, notes: list[str], first: workload.Prompt) -> None:
    """One short streamed request made of the workload's first prompt; drop the optional fields the server
    refuses. An InputError when the server cannot stream a completion at all."""
    short = replace(target, timeout_s=min(target.timeout_s, 120))  # a probe waits two minutes at most
    if target.api == "embeddings":
        rec = await client.send(session, short, embed.body(target.model, first.text), time.perf_counter(), [],
                                reader=embed.read)
        if not rec.ok:
            raise InputError(f"the server did not answer an embedding from {target.url}: {rec.error} ({rec.detail})",
                             hint="check --model: an embedding model, served with its embeddings endpoint")
        return
    prompt = workload.Prompt(first.text, first.input_tokens, min(first.max_tokens, 4))
    last = None
    for ignore_eos, usage in ((target.ignore_eos, True), (False, True), (False, False)):
        if not target.ignore_eos and ignore_eos:
            continue
        rec = await client.send(session, short, workload.body(target.api, target.model, prompt, ignore_eos, usage),
                                time.perf_counter(), [])
        if rec.ok:
            if target.ignore_eos and not ignore_eos:
                notes.append("the server refused ignore_eos/min_tokens: output lengths are the model's own choice")
            if not usage:
                notes.append("the server refused stream_options.include_usage: token counts are one per streamed chunk")
            target.ignore_eos, target.usage = ignore_eos, usage
            return
        last = rec
        if not rec.error.startswith("http-4"):
            break  # not a refusal of a field: another try would not help
    assert last is not None
    raise InputError(f"the server did not stream a completion from {target.url}: {last.error} ({last.detail})",
                     hint="check --model and --api (chat or completions)")
