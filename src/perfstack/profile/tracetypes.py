"""The typed form a trace event is decoded into (``trace`` builds the events from it): its phase first, then the
fields the builder reads, with the JSON types and ranges it can use. An event whose fields have other types fails
validation here and is decoded again by the lenient path (``trace._Builder.loose``), which defines what every
field means.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, List, Optional, Union

import msgspec
from msgspec import Meta, Raw

from perfstack.profile.tracefile import _NULL

_I64 = Annotated[int, Meta(ge=-(2**63) + 1, le=2**63 - 1)]  # what trace._int keeps


class Args(msgspec.Struct, gc=False):
    device: Optional[_I64] = None
    stream: Optional[_I64] = None
    correlation: Optional[_I64] = None
    external_id: Optional[_I64] = msgspec.field(default=None, name="External id")
    bytes: Optional[_I64] = None
    dims: Raw = msgspec.field(default=_NULL, name="Input Dims")
    types: Raw = msgspec.field(default=_NULL, name="Input type")
    concrete: Raw = msgspec.field(default=_NULL, name="Concrete Inputs")
    strides: Raw = msgspec.field(default=_NULL, name="Input Strides")
    device_type: Optional[_I64] = msgspec.field(default=None, name="Device Type")  # [memory] events
    device_id: Optional[_I64] = msgspec.field(default=None, name="Device Id")
    allocated: Optional[_I64] = msgspec.field(default=None, name="Total Allocated")
    reserved: Optional[_I64] = msgspec.field(default=None, name="Total Reserved")


# No clock gives a time beyond 2**53 µs (285 years; past it a float has no µs left): a trace that
# claims one is refused when read, not left to turn into inf and NaN in the analysis.
MAX_TIME_US = float(2**53)
_TIME = Annotated[float, Meta(ge=-MAX_TIME_US, le=MAX_TIME_US)]


# An event is told by its phase ("ph") before anything else of it is decoded: the builder reads complete
# events ("X") and instants ("i", the allocator's [memory] events) only, and of a phase it does not read,
# often a third of a trace's events (the flow arrows between a launch and its kernel), nothing is built.
# An event with no phase, or one outside the trace event format's, fails its batch's typed decoding, and the
# batch is read event by event, as other odd events are (_Builder.raw).


class Event(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    ph: ClassVar[str] = "X"
    cat: Optional[str] = None
    name: Optional[str] = None
    ts: Optional[_TIME] = None
    dur: Optional[_TIME] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    args: Optional[Args] = None


class Instant(Event, tag="i"):
    ph: ClassVar[str] = "i"


def _unread(phase: str) -> type:
    return msgspec.defstruct(f"_Phase{ord(phase)}", [("ph", ClassVar[str], phase)], gc=False, tag_field="ph",
                             tag=phase)


PHASES: Any = Union[(Event, Instant, *map(_unread, "BEICbneSTpFstfPNODMVvRc()"))]


NO_ARGS = Args()  # what an event without args reads as


EVENT = msgspec.json.Decoder(PHASES)
EVENTS = msgspec.json.Decoder(List[PHASES])
