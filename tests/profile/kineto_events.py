"""A small writer of Kineto (torch.profiler Chrome trace) events, for event-level tests of structures no
recorded trace in tests/fixtures/traces has yet (a KV cache grown by torch.cat, activation checkpointing,
DDP with gradient accumulation). It writes what torch 2.11's exporter writes for these fields (the names,
categories and args the recorded traces have): ``ProfilerStep#N`` and record_function ranges as
``user_annotation``, operators as ``cpu_op`` with ``Input Dims``/``Input type``/``Concrete Inputs``,
``cudaLaunchKernel`` as ``cuda_runtime`` with a ``correlation``, kernels as ``kernel`` on a device and
stream with the same correlation, ``[memory]`` instant events with ``Total Allocated``/``Total Reserved``,
and ``deviceProperties`` with ``totalGlobalMem``.

The CPU clock advances with each call; the GPU runs each stream in order, a kernel starting at the later
of its launch (+3 µs) and its stream's last end (``after`` makes it wait for another stream, as an event
wait does).
"""

from __future__ import annotations

import gzip
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

H100 = "NVIDIA H100 80GB HBM3"
H100_MEMORY = 85017493504  # bytes, as Kineto writes for an H100 80GB HBM3
CAT_KERNEL = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_contig<at::native::(anonymous "
              "namespace)::OpaqueType<2u>, unsigned int, 4, 128, 1>(at::native::(anonymous namespace)::"
              "OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::"
              "(anonymous namespace)::OpaqueType<2u>, unsigned int, 128, 1>, at::native::(anonymous namespace)::"
              "TensorSizeStride<unsigned int, 4u>, int, unsigned int)")
GEMM_KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
COPY_KERNEL = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
               "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}"
               "::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::"
               "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}"
               "::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::"
               "gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}"
               "::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::"
               "TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::"
               "operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::"
               "{lambda(int)#1})")
GELU_KERNEL = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::"
               "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::"
               "operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::"
               "GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() "
               "const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)")
FLASH_KERNEL = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, " \
               "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, false, " \
               "false, false, false, true, false, false>(pytorch_flash::Flash_fwd_params)"
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ADAM_KERNEL = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
               "namespace)::FusedAdamMathFunctor<float, 4, at::native::ADAM_MODE::ADAMW, false>>(...)")


class Kineto:
    def __init__(self, gpu: str = H100, memory: int | None = H100_MEMORY, rank: int | None = None,
                 world: int | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.gpu, self.memory, self.rank, self.world = gpu, memory, rank, world
        self.t = 1000.0  # CPU clock, µs
        self.free: dict[int, float] = {}  # stream -> the end of its last kernel
        self.corr = 0
        self.ext = 0
        self.step_no = 0

    def _x(self, cat: str, name: str, ts: float, dur: float, tid: int = 1, pid: int = 1,
           args: dict[str, Any] | None = None) -> None:
        e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3),
                             "dur": round(dur, 3)}
        if args:
            e["args"] = args
        self.events.append(e)

    @contextmanager
    def span(self, name: str, cat: str = "user_annotation", tid: int = 1, **args: Any) -> Iterator[None]:
        """A range (a record_function, ProfilerStep#N, an autograd node) around what the block adds."""
        t0 = self.t
        self.t += 1.0
        yield
        self.t += 1.0
        self.ext += 1
        self._x(cat, name, t0, self.t - t0, tid, args={"External id": self.ext, **args})

    @contextmanager
    def step(self) -> Iterator[None]:
        self.step_no += 1
        with self.span(f"ProfilerStep#{self.step_no}"):
            yield

    @contextmanager
    def op(self, name: str, dims: list | None = None, types: list | None = None, concrete: list | None = None,
           tid: int = 1) -> Iterator[None]:
        args: dict[str, Any] = {}
        if dims is not None:
            args["Input Dims"] = dims
        if types is not None:
            args["Input type"] = types
        if concrete is not None:
            args["Concrete Inputs"] = concrete
        with self.span(name, "cpu_op", tid, **args):
            yield

    def launch(self, kernel: str, dur: float, stream: int = 7, tid: int = 1, after: float | None = None) -> float:
        """cudaLaunchKernel on the CPU (5 µs) and its kernel on the GPU; returns the kernel's end."""
        self.corr += 1
        self._x("cuda_runtime", "cudaLaunchKernel", self.t, 4.0, tid, args={"correlation": self.corr})
        start = max(self.t + 3.0, self.free.get(stream, 0.0), after or 0.0)
        self.t += 5.0
        self._x("kernel", kernel, start, dur, stream, pid=0,
                args={"device": 0, "stream": stream, "correlation": self.corr})
        self.free[stream] = start + dur
        return start + dur

    def kernel_op(self, name: str, kernel: str, dur: float, dims: list | None = None, types: list | None = None,
                  concrete: list | None = None, tid: int = 1, stream: int = 7, after: float | None = None) -> float:
        with self.op(name, dims, types, concrete, tid):
            return self.launch(kernel, dur, stream, tid, after)

    def memory_event(self, allocated: int, reserved: int, device: int = 0) -> None:
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
                            "ts": round(self.t, 3), "args": {"Total Reserved": reserved, "Total Allocated": allocated,
                                                              "Bytes": 2048, "Addr": 139650, "Device Id": device,
                                                              "Device Type": 1}})

    def sync(self) -> None:
        """The CPU waits for every stream (cudaDeviceSynchronize), as the end of a step often does."""
        end = max(self.free.values(), default=self.t)
        self._x("cuda_runtime", "cudaDeviceSynchronize", self.t, max(1.0, end - self.t))
        self.t = max(self.t + 1.0, end) + 1.0

    def write(self, path: Path) -> Path:
        props: dict[str, Any] = {"id": 0, "name": self.gpu}
        if self.memory:
            props["totalGlobalMem"] = self.memory
        doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [props], "traceEvents": self.events}
        if self.rank is not None:
            doc["distributedInfo"] = {"rank": self.rank, "world_size": self.world, "backend": "nccl"}
        with gzip.open(path, "wt") as f:
            json.dump(doc, f)
        return path
