"""A timed trace to replay: when each request arrives, how long its prompt is, how much it asks for.

Two public shapes of the field are read, one request per line or row:

- mooncake-style JSONL: ``timestamp`` (milliseconds since the trace began), ``input_length``,
  ``output_length`` and optionally ``hash_ids``, the prompt's blocks of ``block`` tokens (512 in the
  published traces): requests that share leading ids share that much prompt prefix;
- BurstGPT-style columns, as CSV or as JSONL keys: ``Timestamp`` (seconds), ``Request tokens``,
  ``Response tokens`` (``Model``, ``Total tokens``, ``Log Type`` are ignored); a row with 0 response
  tokens is a request that failed when recorded, and is skipped.

Prompts are synthetic text of the recorded lengths (the same words the synthetic workload uses; each block
of a hash id always the same text, so shared prefixes are shared in fact). Send times keep the recorded
gaps, from the first request; ``--trace-speed`` divides them. Lines that cannot be used are counted, never
fatal, unless none can.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from pathlib import Path
from typing import Any, Optional

from perfstack.errors import InputError
from perfstack.loadtest.workload import MAX_BAD_LINES_SHOWN, Prompt, Workload, _text, read_text_file

MAX_TOKENS = 1 << 20  # a length beyond this is not a request's
MAX_ENTRIES = 1_000_000
MOONCAKE = ("timestamp", "input_length", "output_length")
BURSTGPT = ("Timestamp", "Request tokens", "Response tokens")


def _num(v: Any) -> Optional[float]:
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _length(v: Any) -> Optional[int]:
    x = _num(v)
    return int(x) if x is not None and x == int(x) and 0 <= x < MAX_TOKENS else None


def entry(item: Any) -> Optional[tuple[float, int, int, tuple[int, ...]]]:
    """(arrival s, input tokens, output tokens, hash ids) of one trace line, or None when it cannot be used
    (a BurstGPT failure included)."""
    if not isinstance(item, dict):
        return None
    if all(k in item for k in MOONCAKE[1:]):
        t = _num(item.get("timestamp", 0))
        at = t / 1e3 if t is not None else None
        inp, out = _length(item["input_length"]), _length(item["output_length"])
        ids = item.get("hash_ids") or []
        hashes = tuple(int(h) for h in ids if isinstance(h, int) and not isinstance(h, bool)) if isinstance(ids, list) else ()
        if isinstance(ids, list) and len(hashes) != len(ids):
            return None
    elif all(k in item for k in BURSTGPT):
        at = _num(item["Timestamp"])
        inp, out, hashes = _length(item["Request tokens"]), _length(item["Response tokens"]), ()
    else:
        return None
    if at is None or at < 0 or inp is None or out is None or inp < 1 or out < 1:
        return None
    return at, inp, out, hashes


def _items(raw: str, name: str) -> list[tuple[int, Any]]:
    if name.endswith(".csv"):
        return list(enumerate(csv.DictReader(io.StringIO(raw)), 2))
    out = []
    for ln, line in enumerate(raw.splitlines(), 1):
        if line.strip():
            try:
                out.append((ln, json.loads(line)))
            except (json.JSONDecodeError, RecursionError, ValueError):
                out.append((ln, None))
    return out


def load(path: str, block: int = 512, seed: int = 0, tokenizer: Any = None) -> tuple[Workload, list[str]]:
    """The trace at ``path`` as a workload whose prompts carry their send times (``Workload.arrivals``)."""
    p = Path(path)
    raw = read_text_file(p, "trace")
    if block < 1:
        raise InputError("--trace-block must be at least 1")
    rows, bad = [], []
    for where, item in _items(raw, p.name.lower())[:MAX_ENTRIES]:
        got = entry(item)
        if got is None:
            bad.append(where)
        else:
            rows.append(got)
    if not rows:
        raise InputError(f"trace {p} holds no usable request",
                         hint='mooncake JSONL: {"timestamp": 0, "input_length": 512, "output_length": 128} per line; '
                              "or BurstGPT columns: Timestamp, Request tokens, Response tokens")
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0]
    blocks: dict[int, str] = {}

    def block_text(h: int) -> str:
        if h not in blocks:
            blocks[h] = _text(random.Random(seed * 1_000_037 + h), block, tokenizer)[0]
        return blocks[h]

    prompts = []
    for i, (_, inp, out, hashes) in enumerate(rows):
        if hashes:
            # the blocks' text, the last one cut to the recorded length: shared ids, shared prefix
            text = " ".join(block_text(h) for h in hashes)
            if tokenizer is None:
                text = " ".join(text.split(" ")[:inp])
            else:
                text = tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)[:inp], skip_special_tokens=True)
        else:
            text = f"{i}: " + _text(random.Random(seed * 1_000_003 + i + 1), max(1, inp - 1), tokenizer)[0]
        # with a tokenizer, what is sent counted as the server will (decoding and encoding again can merge)
        prompts.append(Prompt(text, inp if tokenizer is None else len(tokenizer.encode(text, add_special_tokens=False)),
                              out))
    notes = []
    if bad:
        shown = ", ".join(str(b) for b in bad[:MAX_BAD_LINES_SHOWN]) + ("…" if len(bad) > MAX_BAD_LINES_SHOWN else "")
        notes.append(f"{len(bad)} unusable or failed requests in {p.name} skipped (line {shown})")
    spec = {"kind": "trace", "file": p.name, "entries": len(rows), "skipped": len(bad), "block": block,
            "span_s": rows[-1][0] - t0, "seed": seed, "tokenizer": getattr(tokenizer, "name_or_path", None)}
    return Workload(prompts, spec, exact_counts=tokenizer is not None, arrivals=[r[0] - t0 for r in rows]), notes
