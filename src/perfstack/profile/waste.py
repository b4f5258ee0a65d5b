"""What a fix of the busy GPU's waste would leave (``Waste``), and the ceilings its detectors estimate the
fixed kernels at.

A detector (``busy``, ``fusion``, ``precision``; ``copies``, ``recompute``, ``scatter``, ``accumulation`` for
the work a step repeats) returns a ``Waste``: the new duration of every GPU event the fix would change (µs; 0
for a kernel the fix removes) and its evidence. The replay model (``simulate``) turns those into step time, so
a faster kernel on a CPU-bound step is worth nothing, as it should be. Estimates of the fixed kernels come from
bytes and FLOPs at practical ceilings of the SKU (``specs``), never from the slow kernels' own speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from perfstack.records.profile import Record

if TYPE_CHECKING:
    from perfstack.profile.trace import GpuEvent
    from perfstack.specs.table import GpuSpec

HBM_PRACTICAL = 0.90  # a streaming kernel reaches ~90% of the HBM peak (specs.practical hbm_copy)
MIN_KERNEL_US = 2.5  # the shortest a fused kernel runs on an H100 (launch to completion of a tiny kernel)
# Fractions of the dense 16-bit peak that well-tuned kernels of each kind reach on an H100 in this
# project's validation traces (tests/fixtures/traces/validation, record_validation.py): cuDNN SDPA
# at seq 2048, head dim 64, causal: 381 TFLOP/s forward, 303 backward, 322 over both (attention-fixed);
# bf16 channels_last convolutions of ResNet-50: 314 forward, 323 backward (resnet50-fixed).
FLASH_PRACTICAL = 0.33
CONV_PRACTICAL = 0.33
TF32_PRACTICAL, FP32_PRACTICAL, BF16_PRACTICAL = 0.72, 0.77, 0.80  # specs.practical_fraction


@dataclass
class Waste:
    id: str
    new_dur: dict[int, float] = field(default_factory=dict)  # device event index -> µs after the fix
    merged: set[int] = field(default_factory=set)  # events fused into another: their launches go away too
    evidence: Record = field(default_factory=Record)  # the record of records.waste its finding quotes

    def saved_us(self, gpu: list[GpuEvent]) -> float:
        return sum(gpu[i].dur - d for i, d in self.new_dur.items())


def hbm_gbps(spec: GpuSpec | None) -> float | None:
    return spec.hbm_tbps * 1e3 * HBM_PRACTICAL if spec and spec.hbm_tbps else None
