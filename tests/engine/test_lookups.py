"""An indexing kernel's offsets and the bytes it copies (``engine.lookups``), and the ``index``
kind that prices them; ops that write in place into a storage they did not make, priced as
the copies they are. Every count below is worked out by hand from the shapes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_graphbudget.api import profile_model
from pytest_graphbudget.engine.lookups import index_lookups
from pytest_graphbudget.hardware import from_table

FREE = 1e18  # a rate no kernel reaches: its term costs nothing measurable


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        # x[idx]: 3 rows of 4 floats, an offset each
        ("index", (torch.zeros(10, 4), [torch.tensor([1, 5, 2])]), (3, 3 * 4 * 4)),
        # x[:, idx] over (2, 10, 4): 2 x 3 rows of 4, an offset each
        ("index", (torch.zeros(2, 10, 4), [None, torch.tensor([1, 5, 2])]), (6, 6 * 4 * 4)),
        # x[i, j] over (10, 10, 4): 5 pairs, a row of 4 each
        ("index", (torch.zeros(10, 10, 4), [torch.arange(5), torch.arange(5)]), (5, 5 * 16)),
        # x[i[:, None], j] over (10, 10): broadcast 3 x 4 single elements
        ("index", (torch.zeros(10, 10), [torch.arange(3)[:, None], torch.arange(4)]), (12, 48)),
        # int64 values: 8 bytes an element
        ("index", (torch.zeros(10, dtype=torch.int64), [torch.arange(7)]), (7, 56)),
        # nearest upsampling's decomposition, (1, 2, 4, 4) -> (1, 2, 8, 8): every element
        (
            "_unsafe_index",
            (
                torch.zeros(1, 2, 4, 4),
                [None, None, torch.arange(8)[:, None] // 2, torch.arange(8) // 2],
            ),
            (128, 512),
        ),
        # y[idx] = v: 3 rows of 4 written
        ("index_put", (torch.zeros(10, 4), [torch.tensor([1, 5, 2])], torch.ones(3, 4)), (3, 48)),
        # accumulate=True adds (a scatter-add, priced by its adds): not this kernel
        ("index_put", (torch.zeros(10, 4), [torch.arange(3)], torch.ones(3, 4), True), (0, 0)),
        # a boolean mask is a selection (a nonzero first)
        ("index", (torch.zeros(4, 2), [torch.tensor([True, False, True, False])]), (0, 0)),
        ("index_select", (torch.zeros(10, 4), 0, torch.arange(3)), (0, 0)),  # a memcpy a row
        # x.index_fill_(0, idx, 1.0) over (10, 4): 2 rows of 4 floats, an offset each
        ("index_fill", (torch.zeros(10, 4), 0, torch.tensor([1, 5]), 1.0), (2, 32)),
        # along dim 1 of (3, 10, 4): 3 x 2 rows of 4, an offset each (as index_copy_)
        ("index_fill", (torch.zeros(3, 10, 4), 1, torch.tensor([1, 5]), 1.0), (6, 96)),
        (
            "index_copy",
            (torch.zeros(3, 10, 4), -2, torch.tensor([1, 5]), torch.ones(3, 2, 4)),
            (6, 96),
        ),
        # scatter_ and put_: an element an index value, no offsets priced: (4, 2) and 3 floats
        ("scatter", (torch.zeros(4, 8), 1, torch.zeros(4, 2, dtype=torch.long), 1.0), (0, 32)),
        ("put", (torch.zeros(10), torch.tensor([1, 2, 3]), torch.ones(3)), (0, 12)),
        ("put", (torch.zeros(10), torch.tensor([1, 2, 3]), torch.ones(3), True), (0, 0)),
    ],
)
def test_index_lookups_counts_an_offset_per_row_it_copies(name, args, expected):
    assert index_lookups(name, args) == expected


def rates(**kinds: tuple[float, float]) -> dict:
    """A kernel table: each kind's (FLOP/s, bytes/s), no launch overhead."""
    table = {
        kind: {"flops_per_s": f, "bytes_per_s": b, "overhead_s": 0}
        for kind, (f, b) in kinds.items()
    }
    return {"peak_tflops": {"float32": 1}, "bandwidth_gbs": 1, "kernels": table}


def estimate(model: nn.Module, args: tuple, table: dict, tier: str | None = None) -> float:
    hardware = from_table("box", table)
    return profile_model(model.eval(), args, hardware=hardware, tier=tier).est_latency_s


class Gather(nn.Module):
    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return x[idx]


GATHER = (torch.randn(10, 4), torch.tensor([1, 5, 2]))


@pytest.mark.parametrize("tier", ["fx", "eager"])
def test_an_index_by_integers_takes_its_offsets_then_the_bytes_it_copies(tier):
    # x[idx]: 3 offsets, then 3 rows of 4 floats, 48 B, read and written: 96 B. The two
    # add (SUMMED_KINDS): 3 / 1e6 + 96 / 1e9, in every tier
    table = rates(index=(1e6, 1e9), copy=(FREE, 1e6))
    assert estimate(Gather(), GATHER, table, tier) == pytest.approx(3e-6 + 96e-9)


def test_an_index_calibrated_before_its_kind_existed_is_priced_as_a_copy_of_what_it_copies():
    # copy's rate over the same 96 B (not x's 160 B and the 24 B of indices it reads all of)
    assert estimate(Gather(), GATHER, rates(copy=(FREE, 1e9))) == pytest.approx(96e-9)


class Put(nn.Module):
    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[idx] = torch.ones(3, 4)
        return y


def test_an_index_put_by_integers_is_priced_as_an_index():
    # clone: reads and writes 160 B, a copy; ones (3, 4): 48 B written, a copy (full); then
    # y[idx] = ones in place: 3 offsets, 3 rows of 4 floats (48 B) read and written, 96 B
    table = rates(index=(1e6, 1e9), copy=(FREE, 1e8))
    assert estimate(Put(), GATHER, table) == pytest.approx((320 + 48) / 1e8 + 3e-6 + 96e-9)


class InPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y.copy_(x)
        return y.zero_()


@pytest.mark.parametrize("tier", ["fx", "eager"])
def test_an_op_writing_in_place_into_a_storage_it_did_not_make_is_a_copy_not_a_view(tier):
    # x (10, 4), 160 B. clone: reads x, writes y: 320 B. copy_(x): reads x, writes y: 320 B.
    # zero_: writes y: 160 B. As views, copy_ and zero_ had cost nothing.
    table = rates(copy=(FREE, 1e9), view=(FREE, 1e6))
    assert estimate(InPlace(), (torch.randn(10, 4),), table, tier) == pytest.approx(800 / 1e9)


class CacheUpdate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 2, 16, 8))

    def forward(self, k: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(2, position, k)  # a static KV cache's update, as Hugging Face's
        self.cache[:, :, -1:].copy_(k[:, :, :1])  # and a slice of it written
        return k * 2


@pytest.mark.parametrize("tier", ["fx", "eager"])
def test_a_write_into_a_cache_is_priced_by_what_it_writes_not_by_the_whole_cache(tier):
    # cache (1, 2, 16, 8) float32, 1,024 B. index_copy_ of k (1, 2, 3, 8) at 3 positions:
    # 2 heads x 3 offsets, 48 floats (192 B) read and written; the slice's copy_: 2 x 8
    # floats (64 B) read and written. k * 2 reads and writes 192 B.
    table = rates(index=(1e6, 1e9), copy=(FREE, 1e8), pointwise=(FREE, 1e7), view=(FREE, 1e6))
    args = (torch.randn(1, 2, 3, 8), torch.tensor([4, 5, 6]))
    expected = 6e-6 + 384e-9 + 128 / 1e8 + 384 / 1e7
    assert estimate(CacheUpdate(), args, table, tier) == pytest.approx(expected)


class Clear(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[y < 0] = 0.0
        return y


def _ops_run(call) -> list[str]:
    """The ATen ops eager torch runs for ``call``, as a dispatch mode sees them."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with Log():
        call()
    return seen


def test_a_write_by_a_mask_in_place_is_priced_by_what_torch_runs_for_it():
    # x (10, 4), 160 B. clone: 320 B, a copy. lt: a comparison, reads 160 B, writes a 40-bool
    # mask: 200 B. y[mask] = 0 in place, as the torch at hand runs it:
    # - up to 2.14, index_put_: a nonzero of the mask, then its writes: it reads the mask
    #   (40 B) and the 0-dim value (4 B), not y, whose elements the mask picks: select's rate;
    # - from 2.15, masked_fill_ (a scalar through a mask): one elementwise pass choosing by the
    #   mask, priced as a comparison: it reads y (160 B) and the mask (40 B), writes y (160 B).
    table = rates(copy=(FREE, 1e9), compare=(FREE, 1e7), select=(FREE, 1e6), view=(FREE, 1e6))
    x = torch.tensor([[1.0, -1.0, 2.0, -2.0]] * 10)
    ops = _ops_run(lambda: Clear()(x))
    if "masked_fill_" in ops:
        expected = 320 / 1e9 + (200 + 360) / 1e7
    else:
        assert "index_put_" in ops, ops
        expected = 320 / 1e9 + 200 / 1e7 + 44 / 1e6
    assert estimate(Clear(), (x,), table, "eager") == pytest.approx(expected)


class Flags(nn.Module):
    def forward(self, flags: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return flags[idx]


def test_a_boolean_tensor_indexed_by_integers_is_an_index_not_a_selection():
    # flags (10, 4) bool, idx 3 int64: 3 offsets, 3 rows of 4 bools (12 B) read and written
    table = rates(index=(1e6, 1e9), select=(FREE, 1e6))
    args = (torch.zeros(10, 4, dtype=torch.bool), torch.tensor([1, 5, 2]))
    assert estimate(Flags(), args, table) == pytest.approx(3e-6 + 24e-9)


class Counts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("counts", torch.zeros(16, 16))

    def forward(self, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.counts.index_copy_(0, idx, v)
        return self.counts.sum()


@pytest.mark.parametrize("tier", ["fx", "eager"])
def test_a_buffer_written_in_place_is_read_once_by_the_op_after(tier):
    # counts (16, 16) float32, 1,024 B. index_copy_ of v (2, 16): 2 offsets, 128 B read and
    # written. sum reads counts once, 1,024 B, and writes 4 B. The taped forward had read it
    # twice, as index_copy_'s output and as a buffer: 2,052 B
    table = rates(index=(1e6, 1e9), reduction=(FREE, 1e9), view=(FREE, 1e6))
    args = (torch.tensor([1, 3]), torch.randn(2, 16))
    assert estimate(Counts(), args, table, tier) == pytest.approx(2e-6 + 256e-9 + 1028e-9)


class CacheOnly(CacheUpdate):
    def forward(self, k: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(2, position, k)
        return self.cache[:, :, :4]


@pytest.mark.parametrize("tier", ["fx", "eager"])
def test_a_write_in_place_with_no_other_kernel_in_the_graph_is_a_kernel_of_its_own(tier):
    # The cache update of the test above, then a view of the cache: 6 offsets, 192 B read and
    # written. It had been left out of every kernel, the estimate 0 and its subgraph -1
    table = rates(index=(1e6, 1e9), view=(FREE, 1e6))
    args = (torch.randn(1, 2, 3, 8), torch.tensor([4, 5, 6]))
    assert estimate(CacheOnly(), args, table, tier) == pytest.approx(6e-6 + 384e-9)
    profile = profile_model(CacheOnly().eval(), args, tier=tier)
    assert [n.subgraph for n in profile.node_info] == [0] * len(profile.node_info)


class Writes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(16, 64))
        self.register_buffer("flat", torch.zeros(100))

    def forward(self, x, idx, pos, v, w):
        self.state.index_fill_(0, idx, 0.0)
        self.state.scatter_(1, pos, v)
        self.flat.put_(idx, w)
        return x * 2


@pytest.mark.parametrize("tier", ["fx", "eager"])
def test_writes_in_place_by_index_are_priced_by_what_they_write_not_their_destination(tier):
    # state (16, 64) float32, 4,096 B; each write had been priced as a copy of all of it,
    # read and written: 8,192 B. index_fill_ of 2 rows: 2 offsets, 2 x 64 floats (512 B)
    # read and written. scatter_ of v (16, 1) at pos (16, 1): 16 floats written (64 B), pos
    # (128 B) and v (64 B) read. flat (100,): put_ of w at idx, 2 floats written (8 B), idx
    # (16 B) and w (8 B) read. x (4, 4), 64 B: x * 2 reads and writes 128 B
    table = rates(index=(1e6, 1e9), copy=(FREE, 1e8), pointwise=(FREE, 1e7), view=(FREE, 1e6))
    args = (
        torch.randn(4, 4),
        torch.tensor([1, 3]),
        torch.zeros(16, 1, dtype=torch.long),
        torch.ones(16, 1),
        torch.ones(2),
    )
    expected = 2e-6 + 1024e-9 + (256 + 32) / 1e8 + 128 / 1e7
    assert estimate(Writes(), args, table, tier) == pytest.approx(expected)


class PutNew(nn.Module):
    def forward(self, x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.index_put(x, (idx,), v)


@pytest.mark.parametrize("tier", ["fx", "eager"])
def test_an_index_put_into_a_new_tensor_copies_the_tensor_first(tier):
    # torch.index_put(x, (idx,), v): a clone of x (10, 4), 160 B read and written, then the
    # writes of v (4,) at GATHER's 3 rows: 3 offsets, 48 B read and written. It had been
    # priced by the writes alone
    table = rates(index=(1e6, 1e9))
    args = (*GATHER, torch.ones(4))
    assert estimate(PutNew(), args, table, tier) == pytest.approx(3e-6 + (320 + 96) / 1e9)
