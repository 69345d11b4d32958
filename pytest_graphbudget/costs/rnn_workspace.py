"""oneDNN's LSTM layer on the CPU (``mkldnn_rnn_layer`` and its backward): the weights it
reorders, its scratchpad and the workspace a differentiated forward returns, laid out as
oneDNN's ``rnn_utils`` lays them out (each array on a page), for the oneDNN torch bundles
(``releases.onednn_rnn_books_twice``: before 3.10, more). Registered and read as
``costs/workspace.py``'s are (bytes, during the op only, float32 CPU figures read off
``torch.profiler(profile_memory=True)``).
"""

from __future__ import annotations

from math import ceil

from pytest_graphbudget.compat import kernels as releases
from pytest_graphbudget.costs.registry import Shape, numel, workspace


@workspace("mkldnn_rnn_layer")
def rnn_layer(x: Shape, w_ih: Shape, w_hh: Shape, *_, out, itemsize: int, **__) -> int:
    """oneDNN's LSTM layer (one direction), while it runs: its two weights reordered into its
    layout (packed for its GEMM in inference), its bias, and its scratchpad. In inference
    the scratchpad holds the layer's states ((steps + 1) x batch, ``rnn_training_workspace``'s
    arrays); a forward autograd will differentiate returns those in its workspace (the op's
    fourth output, not empty then), and its scratchpad holds every step's gates instead.
    Within 0.2% of the profiler at every size tried, less 776 bytes of oneDNN's own."""
    if itemsize != 4:
        return 0
    steps, batch, width, gates, hidden = _rnn_sizes(x, w_ih, w_hh)
    if isinstance(out, tuple) and len(out) > 3 and numel(out[3]):
        return (width + hidden) * _good_ld(gates) * itemsize + _rnn_scratch(x, w_ih, w_hh)
    states = 2 * (steps + 1) * batch * itemsize
    layer_states = states * _good_ld(max(width, hidden))
    # one sample's steps go through the layer's GEMM at once (brgemm's merged layer: mb 1)
    gate_steps = steps if batch == 1 and steps > 1 else 1
    gates_scratch = gate_steps * batch * _good_ld(gates) * itemsize
    hidden_scratch = batch * _good_ld(hidden) * itemsize
    scratch = _pages(
        layer_states,
        gates_scratch,
        hidden_scratch,
        gates * itemsize,
        states * hidden,
        *[layer_states] * _unused_state_arrays(),
    )
    scratch += _booked_again(gates_scratch, hidden_scratch)
    packed = ceil(gates / 128) * 128  # oneDNN's packed GEMM takes 4H in blocks of 128
    return ((width + hidden) * packed + gates) * itemsize + scratch


@workspace("mkldnn_rnn_layer_backward", contiguous=(10, 11, 12))
def rnn_layer_backward(x: Shape, w_ih: Shape, w_hh: Shape, *rest, out, itemsize: int, **__) -> int:
    """oneDNN's LSTM backward (one direction): the layer's two weights reordered into its
    layout (4H padded, and a third copy of a weight whose other side oneDNN pads too: H or I
    a multiple of 256), its scratchpad (every step's gate gradients) and zeros for a hidden
    or cell gradient autograd left undefined. The contiguous copies of its gradients (a sum's
    expanded one) are the registry's."""
    if itemsize != 4:
        return 0
    _, batch, width, gates, hidden = _rnn_sizes(x, w_ih, w_hh)
    weights = (width + hidden) * _good_ld(gates)
    weights += sum(_good_ld(side) * gates for side in (width, hidden) if _good_ld(side) != side)
    undefined = sum(g is None for g in rest[8:10])  # grad_hy, grad_cy
    return (weights + undefined * batch * hidden) * itemsize + _rnn_scratch(x, w_ih, w_hh)


def _rnn_sizes(x: Shape, w_ih: Shape, w_hh: Shape) -> tuple[int, int, int, int, int]:
    """Steps, batch, input width, gates (4H) and hidden size of an LSTM layer's call."""
    return x[0], x[1] if len(x) == 3 else 1, w_ih[1], w_ih[0], w_hh[1]


def _rnn_scratch(x: Shape, w_ih: Shape, w_hh: Shape) -> int:
    """The scratchpad of an LSTM layer's differentiated forward or its backward, with its
    bias: every step's gates, then a step's hidden and cell state, page by page."""
    steps, batch, _, gates, hidden = _rnn_sizes(x, w_ih, w_hh)
    itemsize = 4
    bias = gates * itemsize
    per_step = (
        steps * batch * _good_ld(gates) * itemsize,
        batch * _good_ld(hidden) * itemsize,
        batch * hidden * itemsize,
    )
    return bias + _pages(*per_step, bias, bias) + _booked_again(*per_step)


PAGE = 4096
"""oneDNN starts each array of an RNN's workspace on a page (``rnn_utils::set_offsets``)."""


def rnn_training_workspace(x: Shape, hidden: int, itemsize: int) -> int:
    """The workspace oneDNN's LSTM layer (one direction) returns from a forward that autograd
    will differentiate, saved for its backward: every step's gates and hidden state, and three
    arrays of the layer's states and two of its cell states, (steps + 1) x batch each, every
    array on a page of its own (``rnn_utils::set_workspace_sizes``; bytes exact for float32
    at every size tried on torch 2.4, 2.9 and 2.14). The op's meta kernel returns it empty."""
    if itemsize != 4:
        return 0
    steps, batch, width = x[0], x[1] if len(x) == 3 else 1, x[-1]
    states = 2 * (steps + 1) * batch * itemsize  # the input's and the output's layer
    arrays = (
        steps * batch * _good_ld(4 * hidden) * itemsize,  # the gates
        steps * batch * _good_ld(hidden) * itemsize,  # the hidden states
        *[states * _good_ld(max(width, hidden))] * (3 + _unused_state_arrays()),
        *[states * hidden] * 2,
    )
    return _pages(*arrays)


def _unused_state_arrays() -> int:
    """The copies of the layer's states oneDNN before 3.10 lays out and no cell reads."""
    return 2 if releases.onednn_rnn_books_twice() else 0


def _booked_again(*sizes: int) -> int:
    """What oneDNN before 3.10 books beside an RNN's scratchpad for the per-step buffers the
    scratchpad already holds: each buffer's bytes taken as float32 elements (four times them)
    and 128 bytes of alignment (``memory_tracking``'s ``book``), an empty one skipped."""
    if not releases.onednn_rnn_books_twice():
        return 0
    return sum(4 * size + 128 for size in sizes if size)


def _pages(*sizes: int) -> int:
    """The bytes of arrays laid out one after another, each starting on a page."""
    offset = 0
    for size in sizes:
        offset = ceil(offset / PAGE) * PAGE + size
    return ceil(offset / PAGE) * PAGE


def _good_ld(dim: int) -> int:
    """oneDNN's leading dimension for float32 (``rnn_utils::get_good_ld``): a multiple of 16
    elements (64 bytes), one block more when it divides 256 (4K aliasing)."""
    ld = ceil(dim / 16) * 16
    return ld + 16 if ld % 256 == 0 else ld
