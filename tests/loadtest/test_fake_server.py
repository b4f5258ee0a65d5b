"""The fast fake streaming server keeps its protocol, its schedule, its queue and its misbehaviours."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

aiohttp = pytest.importorskip("aiohttp")

from fake_server import InThread, Server  # noqa: E402  (pytest puts this folder on sys.path)


def _events(raw: bytes) -> list[str]:
    return [block[6:] for block in raw.decode().split("\n\n") if block.startswith("data: ")]


async def _post(url: str, body: dict, path: str = "/v1/chat/completions", headers: dict | None = None,
                session: "aiohttp.ClientSession | None" = None) -> tuple[int, str, bytes, list[float]]:
    """Status, content type, the body, and when each piece of it arrived (perf_counter)."""
    own = session is None
    session = session or aiohttp.ClientSession()
    try:
        async with session.post(url + path, json=body, headers=headers or {}) as r:
            raw, arrivals = b"", []
            async for piece in r.content.iter_any():
                raw += piece
                arrivals.append(time.perf_counter())
            return r.status, r.content_type, raw, arrivals
    finally:
        if own:
            await session.close()


def _chat(n: int = 5, model: str = "m", usage: bool = False) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": "7: a b c"}], "stream": True, "max_tokens": n}
    if usage:
        body["stream_options"] = {"include_usage": True}
    return body


def test_a_stream_is_openai_shaped_honours_max_tokens_and_keeps_its_schedule():
    with InThread(Server(interval=0.02, ttft=0.05, record_sends=True)) as fs:
        t0 = time.perf_counter()
        status, ctype, raw, arrivals = asyncio.run(_post(fs.url, _chat(6, usage=True)))
        assert status == 200 and ctype == "text/event-stream"
        ev = _events(raw)
        assert ev[-1] == "[DONE]"
        chunks = [json.loads(e) for e in ev[:-1]]
        texts = [c["choices"][0]["delta"]["content"] for c in chunks if c["choices"]]
        assert texts == [" t0", " t1", " t2", " t3", " t4", " t5"]
        assert chunks[0]["object"] == "chat.completion.chunk" and chunks[0]["model"] == "fake"
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {"prompt_tokens": 4, "completion_tokens": 6,
                                                                      "total_tokens": 10}
        assert arrivals[0] - t0 >= 0.045  # the first token waits for the TTFT
        stats = fs.server.stats()
        assert stats["tokens"] == 6 and 15 < stats["gaps_ms"]["p50"] < 40
        assert len(fs.server.sends[7]) == 6  # the numbered prompt's send times

        # legacy completions; no usage chunk unless asked for
        status, _, raw, _ = asyncio.run(_post(fs.url, {"model": "m", "prompt": "x", "stream": True, "max_tokens": 3},
                                              path="/v1/completions"))
        ev = _events(raw)
        assert [json.loads(e)["choices"][0]["text"] for e in ev[:-1]] == [" t0", " t1", " t2"] and ev[-1] == "[DONE]"


def test_models_health_keep_alive_and_unknown_paths():
    async def go(url: str) -> None:
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/v1/models") as r:
                assert (await r.json())["data"][0]["id"] == "fake"
            for _ in range(2):  # one connection, several streams
                assert (await _post(url, _chat(2), session=s))[0] == 200
            async with s.get(url + "/v2/nothing") as r:
                assert r.status == 404
            async with s.post(url + "/v1/completions", data=b"{not json") as r:
                assert r.status == 400
            assert len(s.connector._conns) == 1  # every answer left the connection reusable
    with InThread(Server(interval=0.001, ttft=0.001)) as fs:
        asyncio.run(go(fs.url))


@pytest.mark.parametrize("how", ["model", "header"])
def test_http_errors_and_a_non_openai_page(how):
    def ask(mode: str):
        if how == "model":
            return asyncio.run(_post(fs.url, _chat(2, model=mode)))
        return asyncio.run(_post(fs.url, _chat(2), headers={"X-Fake-Mode": mode}))
    with InThread(Server(interval=0.001, ttft=0.001)) as fs:
        assert ask("fail-500")[0] == 500
        assert ask("fail-429")[0] == 429
        status, ctype, raw, _ = ask("html")
        assert status == 404 and ctype == "text/html" and b"<html>" in raw
        status, _, raw, _ = ask("empty")
        assert status == 200 and _events(raw) == ["[DONE]"]


def test_a_whole_server_that_is_not_openai():
    with InThread(Server(html=True)) as fs:
        async def go() -> None:
            async with aiohttp.ClientSession() as s:
                async with s.get(fs.url + "/v1/models") as r:
                    assert r.status == 404 and r.content_type == "text/html"
        asyncio.run(go())
        assert asyncio.run(_post(fs.url, _chat(2)))[0] == 404


def test_broken_streams():
    with InThread(Server(interval=0.005, ttft=0.005)) as fs:
        with pytest.raises(aiohttp.ClientPayloadError):  # the connection is cut after three tokens
            asyncio.run(_post(fs.url, _chat(8, model="cut")))
        ev = _events(asyncio.run(_post(fs.url, _chat(5, model="malformed")))[2])
        assert "{this is not json" in ev and ev[-1] == "[DONE]"
        ev = _events(asyncio.run(_post(fs.url, _chat(5, model="error-chunk")))[2])
        assert json.loads(ev[2])["error"]["message"] == "out of memory" and len(ev) == 4
        _, _, raw, arrivals = asyncio.run(_post(fs.url, _chat(4, model="stall-0.3")))
        assert len(_events(raw)) == 5 and max(b - a for a, b in zip(arrivals, arrivals[1:])) >= 0.28
        # flaky: the first request behaves, the second fails, the third behaves
        assert [asyncio.run(_post(fs.url, _chat(2, model="flaky-fail-500")))[0] for _ in range(3)] == [200, 500, 200]


def test_requests_beyond_max_running_wait_and_metrics_follow_the_load():
    async def go(url: str) -> tuple[list[float], str, str]:
        async with aiohttp.ClientSession() as s:
            t0 = time.perf_counter()
            tasks = [asyncio.ensure_future(_post(url, _chat(10), session=s)) for _ in range(4)]
            await asyncio.sleep(0.1)
            async with s.get(url + "/metrics") as r:
                busy = await r.text()
            done = await asyncio.gather(*tasks)
            async with s.get(url + "/metrics") as r:
                idle = await r.text()
            return sorted(arr[0] - t0 for _, _, _, arr in done), busy, idle

    with InThread(Server(interval=0.02, ttft=0.02, max_running=2)) as fs:
        firsts, busy, idle = asyncio.run(go(fs.url))
    # two streams start at once; the other two wait for a whole stream (~0.2 s) before their TTFT
    assert firsts[1] < 0.15 and firsts[2] > firsts[1] + 0.15
    assert 'vllm:num_requests_running{model_name="fake"} 2' in busy
    assert 'vllm:num_requests_waiting{model_name="fake"} 2' in busy
    assert 'vllm:kv_cache_usage_perc{model_name="fake"} 1.0000' in busy
    assert "# TYPE vllm:num_preemptions_total counter" in busy
    assert 'vllm:num_requests_running{model_name="fake"} 0' in idle
    assert 'vllm:generation_tokens_total{model_name="fake"} 40' in idle


def test_a_client_that_leaves_frees_its_slot():
    async def go(url: str) -> float:
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/chat/completions", json=_chat(1000)) as r:
                await r.content.readline()  # one line of a 10 s stream, then leave
            t0 = time.perf_counter()
            _, _, _, arrivals = await _post(url, _chat(2))
            return arrivals[0] - t0
    with InThread(Server(interval=0.01, ttft=0.01, max_running=1)) as fs:
        assert asyncio.run(go(fs.url)) < 1.0
        assert fs.server.running == 0 and not fs.server.queue


def test_a_stream_shaped_like_transformers_serve():
    """A role chunk before the TTFT and no [DONE]: a client must time the first text, and end at the body's end."""
    with InThread(Server(interval=0.01, ttft=0.2)) as fs:
        t0 = time.perf_counter()
        status, _, raw, arrivals = asyncio.run(_post(fs.url, _chat(3, model="role-first+no-done")))
    ev = [json.loads(e) for e in _events(raw)]
    assert status == 200 and ev[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert [e["choices"][0]["delta"]["content"] for e in ev[1:]] == [" t0", " t1", " t2"]  # and no [DONE]
    assert arrivals[0] - t0 < 0.15 and arrivals[-1] - t0 >= 0.2
