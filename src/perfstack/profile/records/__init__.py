"""The typed records of a profile: what each analysis pass produces, and how it is written to a Run.

``base`` holds ``Record``, the contract every record keeps (``to_dict`` writes the JSON a profile Run has
always held; ``from_dict`` reads it back, checked as a loaded Run is, tolerant of absent and unknown
fields). The records live in modules named after what they hold: ``steps`` (one step, its idle gaps),
``means`` (means over the steps, the profiler's overhead), ``kernels`` (operators, kernels, kernel
classes, MFU), ``ranks`` (what several ranks add), ``waste`` (what the fixes recover) and ``section``
(the whole section and ``load``, the one way to read it). Import them from here.
"""

from perfstack.profile.records.base import Record
from perfstack.profile.records.kernels import KernelClass, Mfu, OpRow, TopKernel
from perfstack.profile.records.means import Allocator, Comm, Launch, LaunchToStart, Overhead, Sync, Timeline
from perfstack.profile.records.ranks import Straggler
from perfstack.profile.records.section import Section, load
from perfstack.profile.records.steps import CpuCounts, GpuStep, IdleGap, Step
from perfstack.profile.records.waste import WhatIf

__all__ = ["Allocator", "Comm", "CpuCounts", "GpuStep", "IdleGap", "KernelClass", "Launch", "LaunchToStart", "Mfu",
           "OpRow", "Overhead", "Record", "Section", "Step", "Straggler", "Sync", "Timeline", "TopKernel", "WhatIf",
           "load"]
