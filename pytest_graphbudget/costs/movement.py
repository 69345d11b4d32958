"""Ops that move, view, create or describe data: costed at zero FLOPs, never 'unsupported'.

Their bytes still count: the partitioner charges every tensor that crosses a subgraph boundary.
The writes that can also add (``scatter``, ``index_put``) and ``col2im`` are priced in
``reduction.py``, next to the scatter-adds.
"""

from __future__ import annotations

from pytest_graphbudget.costs.registry import zero_cost

zero_cost(
    # views and shape changes
    "view _unsafe_view reshape unsafe_split unsafe_split_with_sizes unsafe_chunk _reshape_alias "
    "permute transpose t expand expand_as squeeze "
    "unsqueeze flatten unflatten slice select narrow split split_with_sizes chunk unbind "
    "as_strided alias detach lift_fresh lift_fresh_copy unfold view_as_real view_as_complex "
    "movedim swapaxes view_copy permute_copy t_copy transpose_copy expand_copy squeeze_copy "
    "unsqueeze_copy slice_copy select_copy split_copy split_with_sizes_copy unbind_copy "
    "alias_copy as_strided_copy diagonal diagonal_copy narrow_copy _conj conj _neg_view "
    # copies and layout
    "clone copy _to_copy to contiguous resolve_conj resolve_neg cat stack hstack vstack concat "
    "concatenate index_fill index_copy detach_copy lu_unpack "
    "masked_scatter masked_select constant_pad_nd pad "
    "reflection_pad1d reflection_pad2d reflection_pad3d replication_pad1d replication_pad2d "
    "replication_pad3d roll flip repeat repeat_interleave tile pixel_shuffle pixel_unshuffle "
    "channel_shuffle native_channel_shuffle im2col triu tril one_hot nonzero "
    "_pack_padded_sequence _pad_packed_sequence set resize resize_as as_strided_scatter "
    "slice_scatter slice_inverse "
    "select_scatter diagonal_scatter rot90 diag_embed block_diag complex nonzero_static "
    "max_unpool2d max_unpool3d "
    # factories and randomness
    "zeros zeros_like ones ones_like empty empty_like empty_strided empty_permuted full "
    "full_like new_zeros "
    "_efficientzerotensor new_ones new_empty new_full new_empty_strided arange linspace logspace "
    "fill zero "
    "scalar_tensor tensor rand rand_like randn randn_like randint randint_like randperm normal "
    "uniform random bernoulli binomial exponential cauchy geometric log_normal poisson "
    "tril_indices triu_indices eye hann_window hamming_window blackman_window bartlett_window "
    "kaiser_window "
    # scalars, asserts, dropout in eval
    "_local_scalar_dense item sym_stride sym_numel sym_storage_offset dim size "
    "stride is_nonzero _assert_async _assert_scalar _functional_assert_async "
    "_functional_assert_scalar sym_constrain_range sym_constrain_range_for_size "
    "native_dropout dropout feature_dropout alpha_dropout record_stream",
    kinds={"_to_copy": "copy", "constant_pad_nd": "pad"},
)

# Lookups: they read only the rows of a weight they return (an embedding table). EmbeddingBag
# (``_embedding_bag``) also reduces the rows it looks up: reduction.py prices it.
zero_cost(
    "embedding index _unsafe_index index_select gather take",
    role="gather",
    kinds={"_unsafe_index": "index"},
)

# Bookkeeping that never names the node it runs in; a profiler's annotations
# (``record_function``, ``nn.DataParallel``'s) compute nothing either.
zero_cost("device sym_size is_pinned _assert_tensor_metadata _linalg_check_errors", role="free")
zero_cost(
    "profiler._record_function_enter profiler._record_function_enter_new "
    "profiler._record_function_exit",
    role="free",
)
