"""The typed records of a profile: what each analysis pass produces, and how it is written to a Run.

Each is a ``records.base.Record`` (``to_dict`` writes the JSON a profile Run has always held; ``from_dict``
reads it back, checked against the annotations, tolerant of absent and unknown fields). The records live in modules named after what they hold: ``steps`` (one step, its idle gaps),
``means`` (means over the steps, the profiler's overhead), ``kernels`` (operators, kernels, kernel
classes, MFU, compiled code), ``run_wide`` (what belongs to the whole run: the ranks, the straggler, the
GPU telemetry), ``waste`` (the waste found and what the fixes recover) and ``section`` (the whole section
and ``load``, the one way to read it). Import them from here.
"""

from perfstack.records.base import Record
from perfstack.records.profile.kernels import Compiled, GemmRow, KernelClass, MemcpyRow, Mfu, OpRow, TopKernel
from perfstack.records.profile.means import Allocator, Comm, Launch, LaunchToStart, Overhead, Sync, Timeline
from perfstack.records.profile.run_wide import RankRow, Straggler, Telemetry
from perfstack.records.profile.section import Section, load
from perfstack.records.profile.steps import CpuCounts, GpuStep, IdleGap, Step
from perfstack.records.profile.waste import (ActivationRecompute, AttentionUnfused, CopyBound, CopyOp,
                                             DdpSyncPerMicrobatch, Fp32Conv, Fp32Matmul, GemmMisaligned,
                                             LargeVocabLoss, MisalignedGroup, OptimizerNotFused, PageableMemcpy,
                                             SlicedBackward, UnfusedElementwise, WasteFound, WhatIf)

__all__ = ["ActivationRecompute", "Allocator", "AttentionUnfused", "Comm", "Compiled", "CopyBound", "CopyOp",
           "CpuCounts", "DdpSyncPerMicrobatch", "Fp32Conv", "Fp32Matmul",
           "GemmMisaligned", "GemmRow", "GpuStep", "IdleGap", "KernelClass", "LargeVocabLoss", "Launch", "LaunchToStart",
           "load", "MemcpyRow", "Mfu", "MisalignedGroup", "OpRow", "OptimizerNotFused", "Overhead", "PageableMemcpy", "RankRow",
           "Record", "Section", "SlicedBackward", "Step", "Straggler", "Sync", "Telemetry", "Timeline", "TopKernel",
           "UnfusedElementwise", "WasteFound", "WhatIf"]
