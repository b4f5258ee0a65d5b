"""The second process of a split trace reading (``traceread``): reads a plain trace file from the
first event of its second part on, builds the events as ``trace.load`` does, and writes them to its
standard output a chunk at a time. Exits non-zero, having sent no end, on anything a serial reading
would have to recover from: the reader then reads the file serially.

    python -c "...; from perfstack.profile.tracehalf import main" TRACE START SIZE OBJECT
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import List

from perfstack.profile.trace import Trace, _Builder
from perfstack.profile.tracetypes import EVENTS
from perfstack.profile.tracefile import Events
from perfstack.profile.traceread import _OBJECT_START, Sender, part


def main(argv: List[str]) -> int:
    p, start, size, obj = Path(argv[0]), int(argv[1]), int(argv[2]), argv[3] == "1"
    gc.disable()  # as trace.load: millions of new objects, none of them in a cycle
    build = _Builder(Trace(path=str(p)), False)
    events = Events(p, EVENTS, part(p, start, size, _OBJECT_START if obj else b"[", b"", end=True))
    send = Sender(build, sys.stdout.buffer)
    for kind, batch in events:
        if kind != "typed":  # an event the typed decoder refused: read serially, where it is read leniently
            return 3
        build.add(kind, batch)
        del batch
        send.add()
    if events.warnings:
        return 3
    send.end(events.n_events, events.head)
    return 0
