"""GPU memory as PyTorch's CUDA caching allocator counts it (issue 36).

``torch.cuda.max_memory_allocated()`` is the peak of the bytes of the allocator's blocks handed
out, not of the tensors' own bytes, nor of the segments it reserved from the driver
(``max_memory_reserved``). Its rules, from ``c10/cuda/CUDACachingAllocator.cpp``:

- a request of ``n`` bytes is rounded up to a multiple of ``MIN_BLOCK`` (512) bytes; a request
  of 0 bytes allocates nothing;
- requests up to ``SMALL_SIZE`` (1 MiB) come from the small pool, others from the large one;
  a free block of the pool is reused best-fit (the smallest that fits), else a new segment is
  reserved: 2 MiB for a small request, 20 MiB under 10 MiB, else the request rounded up to 2 MiB;
- a block larger than the request is split only when the rest is worth keeping (at least 512
  bytes in the small pool, over 1 MiB in the large one): otherwise the whole block is handed out
  and counted, so a 19.5 MiB tensor in a fresh 20 MiB segment counts 20 MiB;
- freed blocks merge with free neighbours of their segment.

``Simulator`` replays those rules over a forward's allocations and frees in order. Besides the
tensors, the forward allocates through the same allocator:

- cuBLAS's workspace, once per handle and stream, at the first cuBLAS call, held from then on
  (``aten/src/ATen/cuda/CublasHandlePool.cpp``): ``CUBLAS_WORKSPACE_CONFIG`` (``:SIZE:COUNT``
  pairs, KiB), by default 32 MiB on compute capability 9.x to 12.x (Hopper, Blackwell) and
  ``:4096:2:16:8`` = 8 MiB + 128 KiB below; and cuBLASLt's (``CUBLASLT_WORKSPACE_SIZE``, KiB,
  default 1 MiB) for the ops that run through it (``addmm`` with a bias: ``nn.Linear``);
- cuDNN's convolution workspace, while the convolution runs: the tensor-core kernels cuDNN
  picks for a float32 (TF32, torch's default for cuDNN) or 16-bit convolution from compute
  capability 7.0 compute in NHWC, so an NCHW convolution holds its input and output in that
  layout beside them, ``input + output`` bytes (an H100's conv net: 256 MiB measured against
  128 MiB of activations; ``benchmarks/GPU_MEMORY_RESULTS.md`` checks it on every GPU lent);
- what a CUDA kernel writes and the host's does not, while the node runs (``cuda_workspace``):
  ``max_pool1d``'s indices (``eager_kernels.eager_cpu_max_pool1d``).

Every figure here is plain arithmetic over the profile's graph; nothing asks a GPU. So a
profile priced for a GPU (a hardware profile with a ``compute_capability``) counts its memory
this way on any host, the CPU runner of a CI included (``count_on_gpu``): a ``memory_max`` for
the card the model ships to is checked against what that card's allocator would hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MIB = 2**20
MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = MIB  # kSmallSize: the largest request of the small pool
SMALL_BUFFER = 2 * MIB  # kSmallBuffer: a small pool's segment
LARGE_BUFFER = 20 * MIB  # kLargeBuffer: the segment of a request under MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc
ROUND_LARGE = 2 * MIB  # kRoundLarge: larger requests' segments are multiples of it

BLAS_KINDS = frozenset({"matmul", "linear", "bmm", "mha", "encoder_layer"})
"""Kinds whose CUDA kernels are cuBLAS calls (``costs/``'s ``kind``)."""
LT_KINDS = frozenset({"linear"})
"""Kinds that run through cuBLASLt (``addmm`` with a bias vector)."""
CONV_KINDS = frozenset({"conv"})
CUBLASLT_DEFAULT = MIB
HOST_PEAK = "peak memory counted as on the host"
"""How a profile's note for a GPU whose peak is not counted here begins (an AMD card, a
training step), which a failed ``memory_max`` repeats (``gate.described.held_as``)."""


def round_size(nbytes: int) -> int:
    """The block a request of ``nbytes`` takes: a multiple of 512 bytes (none for 0)."""
    if nbytes <= 0:
        return 0
    return -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def segment_size(size: int) -> int:
    """The segment reserved for a rounded request of ``size`` bytes no free block fits."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def cublas_workspace(capability: tuple[int, int], config: str | None = None) -> int:
    """cuBLAS's workspace per handle and stream: ``CUBLAS_WORKSPACE_CONFIG`` when set (each
    ``:SIZE:COUNT`` pair is SIZE KiB, COUNT times), else the default of ``capability``."""
    pairs = re.findall(r":([0-9]+):([0-9]+)", config or "")
    if pairs:
        return sum(int(size) * 1024 * int(count) for size, count in pairs)
    if capability[0] in (9, 10, 11, 12):
        return 4096 * 8 * 1024
    return 4096 * 1024 * 2 + 16 * 1024 * 8


@dataclass(frozen=True)
class CudaMemory:
    """The GPU a profile's memory is counted for: its workspaces' sizes."""

    capability: tuple[int, int] = (9, 0)
    cublas_bytes: int = 32 * MIB
    cublaslt_bytes: int = CUBLASLT_DEFAULT

    @classmethod
    def of(
        cls, capability: tuple[int, int], cublas: str | None = None, lt_kib: str | None = None
    ) -> CudaMemory:
        """From a device's capability and the two environment variables' values."""
        found = cublas_workspace(capability, cublas)
        lt = int(lt_kib) * 1024 if lt_kib and lt_kib.isdigit() else CUBLASLT_DEFAULT
        return cls(capability, found, min(lt, found))

    def conv_workspace(self, x_bytes: int, out_bytes: int, dtype: str) -> int:
        """cuDNN's workspace of a convolution (see the module's note)."""
        tensor_cores = self.capability >= (7, 0) and dtype in ("float32", "float16", "bfloat16")
        return x_bytes + out_bytes if tensor_cores else 0


class Simulator:
    """The caching allocator's blocks over one stream (see the module's note)."""

    def __init__(self) -> None:
        self.segments: list[list[list[Any]]] = []  # blocks: [offset, size, allocated, owner]
        self.small: list[bool] = []  # each segment's pool
        self.allocated = self.peak = self.reserved = 0
        self.held: dict[str, int] = {}  # the blocks' bytes allocated now, by owner
        self.at_peak: dict[str, int] = {}  # ``held`` when ``peak`` was reached

    def malloc(self, nbytes: int, owner: str = "") -> tuple[int, int] | None:
        """A block for ``nbytes``: its (segment, offset), None for 0 bytes. ``owner`` names
        what holds it (the node that allocated it; ``""``: the weights and inputs)."""
        size = round_size(nbytes)
        if not size:
            return None
        small = size <= SMALL_SIZE
        found = self._best_fit(size, small)
        if found is None:
            self.segments.append([[0, segment_size(size), 0, ""]])
            self.small.append(small)
            self.reserved += self.segments[-1][0][1]
            found = (len(self.segments) - 1, 0)
        seg, i = found
        blocks = self.segments[seg]
        rest = blocks[i][1] - size
        if rest >= MIN_BLOCK if small else rest > SMALL_SIZE:  # split off what is left
            blocks.insert(i + 1, [blocks[i][0] + size, rest, 0, ""])
            blocks[i][1] = size
        blocks[i][2:] = [1, owner]
        self.allocated += blocks[i][1]
        self.held[owner] = self.held.get(owner, 0) + blocks[i][1]
        if self.allocated > self.peak:
            self.peak, self.at_peak = self.allocated, dict(self.held)
        return seg, blocks[i][0]

    def free(self, block: tuple[int, int] | None) -> None:
        """Give ``block`` back; it merges with free neighbours of its segment."""
        if block is None:
            return
        seg, offset = block
        blocks = self.segments[seg]
        i = next(j for j, b in enumerate(blocks) if b[0] == offset)
        blocks[i][2] = 0
        self.allocated -= blocks[i][1]
        self.held[blocks[i][3]] -= blocks[i][1]
        if i + 1 < len(blocks) and not blocks[i + 1][2]:
            blocks[i][1] += blocks.pop(i + 1)[1]
        if i > 0 and not blocks[i - 1][2]:
            blocks[i - 1][1] += blocks.pop(i)[1]

    def _best_fit(self, size: int, small: bool) -> tuple[int, int] | None:
        """The smallest free block of the pool that holds ``size`` (the lowest address of
        equal ones), as (segment, index)."""
        best = None
        for seg, blocks in enumerate(self.segments):
            if self.small[seg] != small:
                continue
            for i, (_, bsize, used, _) in enumerate(blocks):
                if not used and bsize >= size and (best is None or bsize < best[0]):
                    best = (bsize, seg, i)
        return None if best is None else (best[1], best[2])


@dataclass
class CudaPeak:
    """A forward's peak as the allocator counts it, and what the workspaces added."""

    peak_bytes: int  # max_memory_allocated from an empty allocator: weights, inputs, forward
    reserved_bytes: int  # the segments reserved by then (max_memory_reserved)
    cublas_bytes: int  # cuBLAS's and cuBLASLt's workspaces, held once allocated
    conv_workspace_bytes: int  # the largest cuDNN workspace of one convolution
    at_peak: dict[str, int] = field(default_factory=dict)
    """The blocks held at the peak by the node that allocated them (its activations, and the
    workspaces it set up: the first cuBLAS call's held from then on), as ``live_at_peak``'s;
    the weights' and inputs' blocks are ``""``'s."""


def cuda_peak(weights: list[int], measured: Any, memory: CudaMemory) -> CudaPeak:
    """Replay a forward on an empty allocator: ``weights`` (each parameter's and buffer's
    bytes, allocated as ``.to("cuda")`` moves them), the inputs, then each node's new storages,
    its workspaces, and the frees of ``liveness.lifetimes``."""
    from pytest_graphbudget.engine.liveness import lifetimes

    sim = Simulator()
    for nbytes in weights:
        sim.malloc(nbytes)
    for storages in measured.inputs.values():
        for nbytes in storages.values():
            sim.malloc(nbytes)
    born, dies, size = lifetimes(measured)
    starts: dict[int, list[Any]] = {}
    ends: dict[int, list[Any]] = {}
    for key, step in born.items():
        starts.setdefault(step, []).append(key)
        ends.setdefault(dies[key], []).append(key)
    held: dict[Any, Any] = {}
    handles: set[str] = set()
    conv = 0
    for i, node in enumerate(measured.nodes):
        for key in starts.get(i, ()):
            held[key] = sim.malloc(size[key], node.name)
        for handle, nbytes in _blas_workspaces(node.kind, memory):
            if handle not in handles:
                handles.add(handle)
                sim.malloc(nbytes, node.name)  # held from here on
        if node.cuda_workspace:  # made by the CUDA kernel alone (max_pool1d's indices)
            sim.free(sim.malloc(node.cuda_workspace, node.name))
        if node.kind in CONV_KINDS:
            reads = sum(_known(key, size, measured) for key in node.reads)
            workspace = memory.conv_workspace(reads, sum(node.writes.values()), node.dtype)
            conv = max(conv, workspace)
            sim.free(sim.malloc(workspace, node.name))
        for key in ends.get(i, ()):
            sim.free(held.pop(key))
    lt = memory.cublaslt_bytes if "cublaslt" in handles else 0
    blas = (memory.cublas_bytes if "cublas" in handles else 0) + lt
    at_peak = {name: n for name, n in sim.at_peak.items() if name and n}
    return CudaPeak(sim.peak, sim.reserved, blas, conv, at_peak)


def _blas_workspaces(kind: str, memory: CudaMemory) -> list[tuple[str, int]]:
    """The handles a node of ``kind`` sets up, with their workspaces' bytes."""
    found = []
    if kind in BLAS_KINDS:
        found.append(("cublas", memory.cublas_bytes))
    if kind in LT_KINDS:
        found.append(("cublaslt", memory.cublaslt_bytes))
    return found


def _known(key: Any, size: dict[Any, int], measured: Any) -> int:
    """The bytes of a storage a node reads: an activation's, an input's, else 0 (a weight)."""
    if key in size:
        return size[key]
    return next((found[key] for found in measured.inputs.values() if key in found), 0)


def weight_bytes(model: Any) -> list[int]:
    """Each parameter's and buffer's storage bytes, once a storage, in the order
    ``.to("cuda")`` allocates them (a meta tensor has no address: once a tensor); a tensor
    subclass's (torchao's float8 weight) are its inner tensors'."""
    from pytest_graphbudget.engine.quantized import inner

    found: dict[Any, int] = {}
    for held in (*model.parameters(), *model.buffers()):
        for tensor in inner(held):
            storage = tensor.untyped_storage()
            key = id(tensor) if tensor.is_meta else storage.data_ptr()
            found.setdefault(key, storage.nbytes())
    return list(found.values())


def count_on_gpu(prof: Any, model: Any, measured: Any, memory: CudaMemory) -> CudaPeak:
    """Count ``prof``'s memory as the caching allocator of a GPU of ``memory``'s capability
    does, from its own graph (``cuda_peak``), and say so (``set_peak``)."""
    found = cuda_peak(weight_bytes(model), measured, memory)
    set_peak(prof, found, memory)
    return found


def set_peak(prof: Any, found: CudaPeak, memory: CudaMemory) -> None:
    """Make ``found`` the profile's peak: its ``peak_memory_bytes`` the replayed
    ``max_memory_allocated`` (every block rounded, the weights' included, and the
    workspaces), ``activation_peak_bytes`` what it holds beyond the weights' and inputs' own
    bytes, each subgraph's ``peak_bytes`` its nodes' blocks at that peak (where the profile's
    graph is the one replayed), and ``cuda_memory`` the rules it was counted by."""
    held = prof.weights_bytes + prof.optimizer_state_bytes + prof.input_bytes
    prof.activation_peak_bytes = max(0, found.peak_bytes - held)
    names = {name for s in prof.subgraphs for name in s.nodes}
    if found.at_peak.keys() <= names:  # the graph replayed is the profile's (or named as it)
        for subgraph in prof.subgraphs:
            subgraph.peak_bytes = sum(found.at_peak.get(name, 0) for name in subgraph.nodes)
    major, minor = memory.capability
    prof.cuda_memory = {
        "compute_capability": f"{major}.{minor}",
        "cublas_workspace_bytes": found.cublas_bytes,
        "conv_workspace_bytes": found.conv_workspace_bytes,
    }
