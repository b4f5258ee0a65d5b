"""Damage done to a trace's text by the fuzz tests of its readers: each edit an insert, a deletion, a
replacement, a truncation or a duplication at a fraction of the text."""

from __future__ import annotations


def mutate(data: bytes, edits) -> bytes:
    b = bytearray(data)
    for kind, where, n, token in edits:
        i = int(where * len(b))
        if kind == "insert":
            b[i:i] = token
        elif kind == "delete":
            del b[i:i + n]
        elif kind == "replace":
            b[i:i + len(token)] = token
        elif kind == "truncate":
            del b[i:]
        else:
            b[i:i] = b[i:i + n]
    return bytes(b)
