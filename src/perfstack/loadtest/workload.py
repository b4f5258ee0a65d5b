"""What the load test asks: prompts of chosen lengths, or the user's own, with a fixed seed.

Lengths are in tokens. With the model's tokenizer (``--tokenizer``) synthetic prompts are random
token ids decoded to text, so their length is exact up to the tokenizer's round trip; without one they
are common short English words, one token each in the usual BPE vocabularies, and the counts are
approximate (the Run says so; the server's own usage counts, where it reports them, are what the
figures use).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from perfstack.errors import InputError, UsageError
from perfstack.loadtest.vocabulary import Api

MAX_PROMPT_FILE = 256 << 20  # a prompt file is read whole; beyond this it is not a prompt file
MAX_BAD_LINES_SHOWN = 3

# Short, frequent words: nearly every BPE vocabulary has " word" as one token.
WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have "
         "an had they you were their one all we can her has there been if more when will would who so no time "
         "up out about into than them only other new some could these two may first then do any like my now "
         "over such our man me even most made after also did many off before must well back through years much "
         "where your way down should because long each just state people those too how little good very make "
         "world still see own men work last here might under day great year same another know while life").split()


@dataclass
class Prompt:
    text: str
    input_tokens: int  # our count (exact with a tokenizer, else approximate), the history's included
    max_tokens: int
    history: tuple[tuple[str, str], ...] = ()  # earlier turns of a conversation: (role, content), oldest first


@dataclass
class Workload:
    prompts: list[Prompt]  # a file's prompts (repeated in a shuffled cycle) or the first synthetic ones
    spec: dict[str, Any]  # what made them, for the Run
    exact_counts: bool
    more: Optional[Callable[[int], Prompt]] = None  # synthetic: prompt i, never repeated (no accidental cache hits)
    arrivals: Optional[list[float]] = None  # a trace: each prompt's send time (s from the first), in order

    def cycle(self) -> Iterator[Prompt]:
        if self.more is not None:
            i = 0
            while True:
                yield self.more(i)
                i += 1
        while True:
            yield from self.prompts


def load_tokenizer(name: Optional[str]) -> Any:
    if not name:
        return None
    try:
        from transformers import AutoTokenizer  # optional: only to count tokens exactly
    except ImportError:
        raise UsageError("--tokenizer needs the transformers package",
                         hint="pip install transformers, or leave --tokenizer out (counts become approximate)") from None
    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as e:  # any failure of a third-party loader is a bad argument here
        raise InputError(f"cannot load tokenizer {name!r}: {type(e).__name__}: {str(e)[:200]}") from None


def _lengths(rng: random.Random, mean: int, spread: float, n: int) -> list[int]:
    """``n`` lengths uniform in mean * [1 - spread, 1 + spread] (a fixed length when spread is 0)."""
    lo, hi = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
    return [rng.randint(lo, hi) for _ in range(n)]


def _text(rng: random.Random, n: int, tok: Any) -> tuple[str, int]:
    if tok is None:
        return " ".join(rng.choice(WORDS) for _ in range(n)), n
    special = set(getattr(tok, "all_special_ids", []) or [])
    vocab = [i for i in range(min(len(tok), 1 << 20)) if i not in special] or [0]
    ids = [rng.choice(vocab) for _ in range(n)]
    text = tok.decode(ids, skip_special_tokens=True)
    return text, len(tok.encode(text, add_special_tokens=False))


def synthetic(input_len: int, output_len: int, spread: float = 0.0, shared_prefix: int = 0, seed: int = 0,
              tokenizer: Any = None, prefixes: int = 1, turns: int = 1, conversations: int = 64) -> Workload:
    """An endless sequence of distinct prompts; prompt i depends only on the seed and i.

    ``prefixes`` distinct shared prefixes of ``shared_prefix`` tokens: prompt i starts with prefix i mod
    ``prefixes``. ``turns`` > 1 makes conversations: turn t of a conversation sends the whole history
    (every earlier user turn and an answer of the asked length to each) and a new user turn. The stream
    of prompts takes ``conversations`` conversations at a time, turn by turn (turn 1 of each, then turn
    2 of each, ...), so that a conversation's next turn comes that many requests after its last one:
    answered by then whenever fewer requests than that are in flight."""
    if input_len < 1 or output_len < 1 or shared_prefix < 0:
        raise UsageError("token lengths must be positive")
    if not 0 <= spread < 1:
        raise UsageError("--spread must be in [0, 1)")
    if prefixes < 1 or turns < 1 or conversations < 1:
        raise UsageError("--prefixes, --turns and the conversations in flight must be at least 1")
    heads = [_text(random.Random(seed * 7919 + p), shared_prefix, tokenizer) if shared_prefix else ("", 0)
             for p in range(prefixes)]

    def single(i: int) -> Prompt:
        rng = random.Random(seed * 1_000_003 + i + 1)
        li, lo = _lengths(rng, input_len, spread, 1)[0], _lengths(rng, output_len, spread, 1)[0]
        # a distinct head keeps one prompt's cache from serving another unless a prefix is shared on purpose
        body, k = _text(rng, li, tokenizer)
        prefix, prefix_n = heads[i % prefixes]
        return Prompt(f"{prefix} {i}: {body}" if prefix else f"{i}: {body}", prefix_n + k + 1, lo)

    def turn(conv: int, t: int) -> Prompt:
        """Turn t (0-based) of conversation ``conv``: its history is made of the same draws as its own turns."""
        history: list[tuple[str, str]] = []
        n = 0
        for j in range(t):
            p = single(conv * turns + j)
            answer, k = _text(random.Random(seed * 1_000_033 + conv * turns + j), p.max_tokens, tokenizer)
            history += [("user", p.text), ("assistant", answer)]
            n += p.input_tokens + k
        p = single(conv * turns + t)
        return Prompt(p.text, n + p.input_tokens, p.max_tokens, tuple(history))

    def make(i: int) -> Prompt:
        if turns == 1:
            return single(i)
        block, r = divmod(i, conversations * turns)
        t, c = divmod(r, conversations)
        return turn(block * conversations + c, t)

    spec = {"kind": "synthetic", "input_len": input_len, "output_len": output_len, "spread": spread,
            "shared_prefix": shared_prefix, "seed": seed, "tokenizer": getattr(tokenizer, "name_or_path", None)}
    if prefixes > 1:
        spec["prefixes"] = prefixes
    if turns > 1:
        spec.update(turns=turns, conversations=conversations)
    return Workload([make(0)], spec, exact_counts=tokenizer is not None, more=make)


def _count(text: str, tok: Any) -> int:
    return len(tok.encode(text, add_special_tokens=False)) if tok is not None else max(1, round(len(text) / 4))


def from_file(path: str, output_len: Optional[int], seed: int = 0, tokenizer: Any = None) -> tuple[Workload, list[str]]:
    """Prompts from a JSONL file (one object per line with "prompt" or "text", optional "max_tokens"
    or "output_len") or a ShareGPT-format JSON array ("conversations": the first human turn is the
    prompt, the next answer's length the output length), shuffled by the seed and repeated as needed.
    Bad lines are counted, not fatal."""
    p = Path(path)
    raw = read_text_file(p, "prompt file")
    entries, bad = _parse_entries(raw)
    notes = []
    if bad:
        shown = ", ".join(str(b) for b in bad[:MAX_BAD_LINES_SHOWN])
        more = "…" if len(bad) > MAX_BAD_LINES_SHOWN else ""
        notes.append(f"{len(bad)} unusable entries in {p.name} skipped (line/item {shown}{more})")
    if not entries:
        raise InputError(f"prompt file {p} holds no usable prompt",
                         hint='JSONL: {"prompt": "...", "max_tokens": 128} per line; or a ShareGPT JSON array')
    random.Random(seed).shuffle(entries)
    prompts = []
    for text, out_text, out_n in entries:
        out = output_len or out_n or (_count(out_text, tokenizer) if out_text else None) or 128
        prompts.append(Prompt(text, _count(text, tokenizer), max(1, min(int(out), 1 << 20))))
    spec = {"kind": "file", "file": p.name, "entries": len(entries), "skipped": len(bad),
            "output_len": output_len, "seed": seed, "tokenizer": getattr(tokenizer, "name_or_path", None)}
    return Workload(prompts, spec, exact_counts=tokenizer is not None), notes


def read_text_file(p: Path, what: str) -> str:
    """A UTF-8 file the user named (a prompt file, a trace), refused whole when it is missing, not a
    regular file, larger than MAX_PROMPT_FILE or not text."""
    try:
        if not p.is_file():
            raise InputError(f"{what} {p} does not exist or is not a regular file")
        if p.stat().st_size > MAX_PROMPT_FILE:
            raise InputError(f"{what} {p} is larger than {MAX_PROMPT_FILE >> 20} MiB")
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {what} {p}: {e}") from None


def _parse_entries(raw: str) -> tuple[list[tuple[str, str, Optional[int]]], list[int]]:
    entries: list[tuple[str, str, Optional[int]]] = []
    bad: list[int] = []
    stripped = raw.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except (json.JSONDecodeError, RecursionError, ValueError):
            raise InputError("prompt file starts like a JSON array but is not valid JSON") from None
        numbered = list(enumerate(items if isinstance(items, list) else [], 1))
    else:
        numbered = []
        for ln, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                numbered.append((ln, json.loads(line)))
            except (json.JSONDecodeError, RecursionError, ValueError):
                bad.append(ln)
    for where, item in numbered:
        e = _entry(item)
        if e is None:
            bad.append(where)
        else:
            entries.append(e)
    return entries, bad


def _entry(item: Any) -> Optional[tuple[str, str, Optional[int]]]:
    if not isinstance(item, dict):
        return None
    conv = item.get("conversations") or item.get("conversation")
    if isinstance(conv, list):
        values = [t.get("value") or t.get("content") for t in conv if isinstance(t, dict)]
        turns = [t for t in values if isinstance(t, str) and t]
        if len(turns) < 1:
            return None
        return turns[0], (turns[1] if len(turns) > 1 else ""), None
    text = item.get("prompt", item.get("text"))
    if not isinstance(text, str) or not text:
        return None
    out = item.get("max_tokens", item.get("output_len"))
    out = out if isinstance(out, int) and not isinstance(out, bool) and 0 < out < 1 << 20 else None
    return text, "", out


def body(api: Api, model: str, prompt: Prompt, ignore_eos: bool, usage: bool = True) -> dict[str, Any]:
    """The request body; ``ignore_eos``/``min_tokens`` are extensions most open servers accept, and
    ``stream_options`` an OpenAI field some servers lack: each is dropped when a server refuses it."""
    b: dict[str, Any] = {"model": model, "stream": True, "max_tokens": prompt.max_tokens, "temperature": 0.0}
    if usage:
        b["stream_options"] = {"include_usage": True}
    if api == "chat":
        b["messages"] = [{"role": r, "content": c} for r, c in prompt.history] + [{"role": "user", "content": prompt.text}]
    else:
        b["prompt"] = "\n\n".join([c for _, c in prompt.history] + [prompt.text])
    if ignore_eos:
        b["ignore_eos"] = True
        b["min_tokens"] = prompt.max_tokens
    return b
