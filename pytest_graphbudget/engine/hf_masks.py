"""Hugging Face's attention masks on fakes as on the real inputs they stand for.

transformers 5 decides from the values of a causal LM's inputs whether its attention needs an
explicit mask (``masking_utils``): an ``attention_mask`` with no padding, or position ids of one
unpacked sequence a row, let SDPA run ``is_causal`` with grouped-query attention's keys and
values as they are. It reads those values only off real tensors: on fakes, which it takes for
a trace, it builds the mask, and with it each layer repeats its keys and values for every head
and autograd saves the copies. A training step traced on fakes (and a forward taped on them)
then held what eager torch never allocates: +14% on a 4-layer Llama's step at seq 512 (two
key-value heads for eight) with an unpadded attention mask passed, as training loops pass one.

An encoder's bidirectional mask (``_ignore_bidirectional_mask_sdpa``: ModernBERT's step read
+1.8%) and the padding mask a recurrent layer multiplies in (``create_recurrent_attention_mask``:
Jamba, Mamba hybrids, imported by name into each modeling file) are decided the same way.

``real_input_masks`` answers these questions from the real inputs while the block runs: every
attention mask given (``attention_mask``, ``decoder_attention_mask``, ...: by name, or in its
place in the forward's signature) masks no token, and the ``position_ids`` given count up by
one along each row. Only those answers are taken: a mask the forward builds itself, an input
with padding, or position ids of unknown values (a vision-language model's skip over its image
tokens, which transformers reads as packed sequences) still get transformers' own path, an
explicit mask, over rather than under.

Position ids the forward makes itself are known by the ops that made them (``_provenance``):
``torch.arange`` with step one, plus a number, given a leading axis, expanded or reshaped with
its rows whole, as a decoder makes them when called with neither a mask nor a cache
(``use_cache=False``, as under gradient checkpointing). Anything else done to them (a
vision-language model's offsets, a cumulative sum of the mask) leaves them unknown. A mask the
forward builds of ones when given none (BART's decoder: ``torch.ones``, cast, sliced) is known
the same way to mask no token.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

from pytest_graphbudget import compat


def given_inputs(model: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The forward's inputs by name: the keywords, and positional ones bound to its signature."""
    try:
        signature = inspect.signature(getattr(model, "forward", model))
        bound = signature.bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):  # no signature, or not these arguments: the keywords
        return dict(kwargs)
    named = {k: v for k, v in bound.items() if signature.parameters[k].kind != _KEYWORDS}
    for key, value in bound.items():  # a forward's **kwargs
        named.update(value if signature.parameters[key].kind == _KEYWORDS else {})
    return named


_KEYWORDS = inspect.Parameter.VAR_KEYWORD


def _unpadded(mask: Any) -> bool:
    """A 2-D real ``attention_mask`` that masks no token."""
    import torch

    real = isinstance(mask, torch.Tensor) and mask.dim() == 2 and not compat.is_fake(mask)
    return real and not mask.is_meta and bool(mask.all())


def _unpacked(positions: Any) -> bool:
    """Real position ids given, of one sequence a row."""
    import torch

    if not isinstance(positions, torch.Tensor) or compat.is_fake(positions) or positions.is_meta:
        return False
    return positions.dim() == 2 and bool((positions.diff(dim=-1) == 1).all())


def _provenance() -> Any:
    """A torch function mode that knows, by the ops that made them and never by their values,
    which tensors the block made count up by one along each row (``rows``: position ids) and
    which hold only ones (``ones``: a mask the forward builds when given none)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils.weak import WeakIdKeyDictionary

    numbers = (int, torch.SymInt)
    shifts = {torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__}
    reshapes = {torch.Tensor.expand, torch.Tensor.view, torch.Tensor.reshape, torch.reshape}
    casts = {torch.Tensor.to, torch.Tensor.long, torch.Tensor.clone, torch.Tensor.contiguous}
    made_ones = {torch.ones, torch.ones_like, torch.Tensor.new_ones}
    filled = {torch.full: 1, torch.full_like: 1, torch.Tensor.new_full: 2}  # fill value's place
    ones_kept = reshapes | casts | {torch.Tensor.__getitem__, torch.Tensor.unsqueeze}
    ones_kept |= {torch.Tensor.bool, torch.Tensor.int, torch.Tensor.float, torch.Tensor.type_as}

    class Provenance(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.rows, self.ones = WeakIdKeyDictionary(), WeakIdKeyDictionary()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor) and self._counts_up(func, args, kwargs, out):
                self.rows[out] = True
            if isinstance(out, torch.Tensor) and self._all_ones(func, args, kwargs):
                self.ones[out] = True
            return out

        def _all_ones(self, func: Any, args: tuple, kwargs: dict) -> bool:
            if func in made_ones:
                return True
            if func in filled:
                place = filled[func]
                value = args[place] if len(args) > place else kwargs.get("fill_value")
                return isinstance(value, (bool, int, float)) and value == 1
            source = args[0] if args else None
            return func in ones_kept and isinstance(source, torch.Tensor) and source in self.ones

        def _counts_up(self, func: Any, args: tuple, kwargs: dict, out: Any) -> bool:
            if out.is_floating_point() or out.dim() == 0:
                return False
            if func is torch.arange:  # arange(end), arange(start, end): step one
                step = args[2] if len(args) > 2 else kwargs.get("step", 1)
                return out.dim() == 1 and step == 1 and all(isinstance(a, numbers) for a in args)
            source, other = (args + (None, None))[:2]
            if func in shifts and not kwargs and isinstance(source, numbers):
                source, other = other, source  # a number + rows
            if not isinstance(source, torch.Tensor) or source not in self.rows:
                return False
            if func in shifts:  # rows + a number, no alpha
                return len(args) == 2 and isinstance(other, numbers) and not kwargs
            if func is torch.Tensor.unsqueeze:  # a new leading axis, not a new last one
                return out.shape[-1] == source.shape[-1] and out.shape[-1] != 1
            return func in reshapes | casts and out.shape[-1] == source.shape[-1]

    return Provenance()


def _transformers_model(model: Any) -> bool:
    modules = getattr(model, "modules", None)
    return modules is not None and any(
        type(m).__module__.startswith("transformers.") for m in modules()
    )


@contextlib.contextmanager
def real_input_masks(model: Any, args: tuple, kwargs: dict) -> Iterator[None]:
    """transformers' mask decisions, in the block, as eager takes them on every tier: for
    fakes, answered from the real inputs the model was called with (``args``, ``kwargs``),
    read on entry, outside any trace, where reading a value is no data-dependent op; for real
    tensors, transformers' own, with the read of their values kept off the books; under
    export, without its rule that a trace keeps every mask. No tier counts the read."""
    masking = sys.modules.get("transformers.masking_utils")
    if masking is None:
        yield
        return
    inputs = given_inputs(model, args, kwargs)
    masks = [v for k, v in inputs.items() if k.endswith("attention_mask") and v is not None]
    unpadded = bool(masks) and all(map(_unpadded, masks))
    unpacked = _unpacked(inputs.get("position_ids"))
    made = _provenance() if _transformers_model(model) else contextlib.nullcontext()
    own = {name: vars(masking).get(name) for name in _DECISIONS}

    def unmasked(padding_mask: Any) -> Any:  # None where it is known to mask no token
        if padding_mask is None or padding_mask in getattr(made, "ones", ()):
            return None
        return None if unpadded and not _plain(padding_mask) else padding_mask

    def decide(name: str, padding_mask: Any, *rest: Any, **options: Any) -> bool:
        given = unmasked(padding_mask)
        if _plain(given):
            with compat.unrecorded():  # eager's decision off the values; the read on no books
                return own[name](given, *rest, **options)
        with _not_exporting(masking) if given is None else contextlib.nullcontext():
            return own[name](given, *rest, **options)

    def ignore_causal_mask(padding_mask: Any, *rest: Any, **options: Any) -> bool:
        return decide("_ignore_causal_mask_sdpa", padding_mask, *rest, **options)

    def ignore_bidirectional_mask(padding_mask: Any, *rest: Any, **options: Any) -> bool:
        return decide("_ignore_bidirectional_mask_sdpa", padding_mask, *rest, **options)

    def packed_sequences(position_ids: Any) -> Any:
        if unpacked or position_ids in getattr(made, "rows", ()):
            return None  # what transformers returns for one sequence a row
        if _plain(position_ids):
            with compat.unrecorded():
                packed = own["find_packed_sequence_indices"](position_ids)
            if packed is None:  # one sequence a row, read off the values
                return None
        return own["find_packed_sequence_indices"](position_ids)

    def recurrent_mask(config: Any, inputs_embeds: Any, attention_mask: Any, *rest, **options):
        if attention_mask is not None and attention_mask.dim() == 2:
            given = unmasked(attention_mask)
            if _plain(given):
                with compat.unrecorded():
                    given = None if bool((given == 1).all()) else given
            if given is None:
                return None  # an unpadded mask is not multiplied in
        return own["create_recurrent_attention_mask"](
            config, inputs_embeds, attention_mask, *rest, **options
        )

    answers = (ignore_causal_mask, ignore_bidirectional_mask, packed_sequences, recurrent_mask)
    replaced = {own[k]: new for k, new in zip(_DECISIONS, answers, strict=True) if own[k]}
    with _everywhere(replaced), _transformers_4(unmasked), made:
        yield


@contextlib.contextmanager
def _transformers_4(unmasked: Callable[[Any], Any]) -> Iterator[None]:
    """The decisions transformers 4 takes outside ``masking_utils`` (BERT's, on torch 2.4 and
    2.5), answered as the ones above: ``unmasked`` says which masks are known to mask no
    token."""
    import torch

    legacy = getattr(sys.modules.get("transformers.modeling_attn_mask_utils"), "__dict__", {})
    converter = legacy.get("AttentionMaskConverter")

    def prepared_mask(mask: Any, dtype: Any, tgt_len: Any = None) -> Any:
        """transformers 4's encoder mask for SDPA (BERT's), dropped where it masks no token:
        its check read the values of fakes too (a meta BERT given a mask failed), and under
        export it kept every mask. Else expanded, as transformers expands it."""
        given = unmasked(mask)
        if _plain(given):
            with compat.unrecorded():
                given = None if bool(torch.all(given == 1)) else given
        if given is None:
            return None
        return converter._expand_mask(mask=mask, dtype=dtype, tgt_len=tgt_len)

    pretrained = getattr(sys.modules.get("transformers.modeling_utils"), "PreTrainedModel", None)
    warn = getattr(pretrained, "warn_if_padding_and_no_attention_mask", None)

    def warn_if_padding(self: Any, input_ids: Any, attention_mask: Any) -> None:
        """transformers 4 reads the ids' values for a warning when no mask is given, fakes'
        too (a meta BERT called without a mask failed): only real ids are read, off the
        books, as the mask's values are."""
        if _plain(input_ids):
            with compat.unrecorded():
                warn(self, input_ids, attention_mask)

    replaced = {}
    if legacy.get("_prepare_4d_attention_mask_for_sdpa") and converter is not None:
        replaced[legacy["_prepare_4d_attention_mask_for_sdpa"]] = prepared_mask
    if warn is not None:
        pretrained.warn_if_padding_and_no_attention_mask = warn_if_padding
    try:
        with _everywhere(replaced):
            yield
    finally:
        if warn is not None:
            pretrained.warn_if_padding_and_no_attention_mask = warn


def _plain(tensor: Any) -> bool:
    """A real tensor with values to read: not a fake, nor export's functional wrapper of one
    (torch 2.4's), nor a meta tensor."""
    import torch

    return type(tensor) in (torch.Tensor, torch.nn.Parameter) and not tensor.is_meta


@contextlib.contextmanager
def _not_exporting(masking: Any) -> Iterator[None]:
    """transformers' decisions as eager takes them, under ``torch.export`` too, for a mask that
    masks no token (or none given): they keep the mask whenever export traces, as they cannot
    read its values there, and an exported graph (the ``dynamo`` tier's, a symbolic sweep's)
    then built and applied a mask eager never builds (DistilBERT: a where per layer and one
    FLOP more a score). The check is ``is_torchdynamo_exporting`` (transformers 5) or
    ``is_torchdynamo_compiling`` (4)."""
    names = [
        n for n in ("is_torchdynamo_exporting", "is_torchdynamo_compiling") if n in vars(masking)
    ]
    kept = {name: vars(masking)[name] for name in names}
    for name in names:
        setattr(masking, name, lambda: False)
    try:
        yield
    finally:
        for name, value in kept.items():
            setattr(masking, name, value)


_DECISIONS = (
    "_ignore_causal_mask_sdpa",
    "_ignore_bidirectional_mask_sdpa",
    "find_packed_sequence_indices",
    "create_recurrent_attention_mask",
)


@contextlib.contextmanager
def _everywhere(answers: dict[Any, Any]) -> Iterator[None]:
    """Each function of ``answers`` replaced, in the block, in every transformers module that
    holds it: modeling files import ``create_recurrent_attention_mask`` by name. Read by
    ``vars``: a lazy module's attribute would import what it names. Where each module holds
    them is remembered (``_holders``): with 300 modeling files imported, reading all their
    names took 31 ms, twice a profile."""
    if not answers:
        yield
        return
    by_id = {id(function): function for function in answers}
    wanted = frozenset(by_id)
    swapped = []
    for module in _transformers_modules():
        names = vars(module)
        for attribute in _holders(module, names, by_id, wanted):
            value = names.get(attribute)
            if id(value) in by_id and by_id[id(value)] is value:
                swapped.append((module, attribute, value))
                setattr(module, attribute, answers[value])
    try:
        yield
    finally:
        for module, attribute, value in swapped:
            setattr(module, attribute, value)


def _transformers_modules() -> tuple[Any, ...]:
    """transformers' imported modules, read again when ``sys.modules`` changed (its size, or
    the last name in it: an import appends): 3,000 names took 0.3 ms, four times a profile."""
    last = next(reversed(sys.modules))
    key = (len(sys.modules), last, id(sys.modules[last]))
    if _MODULES.get("key") != key:
        held = [m for n, m in list(sys.modules.items()) if n.startswith("transformers") and m]
        _MODULES.update(key=key, modules=tuple(held))
    return _MODULES["modules"]


_MODULES: dict[str, Any] = {}


_HOLDERS: dict[tuple[int, frozenset[int]], tuple[Any, int, tuple[str, ...]]] = {}
"""(Module id, the functions looked for) -> (the module, its number of names when read, the
names that held one). Read again when the module gained or lost a name (an import that was
under way); the names found are checked at each use."""


def _holders(
    module: Any, names: dict[str, Any], by_id: dict[int, Any], wanted: frozenset[int]
) -> tuple[str, ...]:
    key = (id(module), wanted)
    known = _HOLDERS.get(key)
    if known is not None and known[0] is module and known[1] == len(names):
        return known[2]
    found = tuple(n for n, v in list(names.items()) if id(v) in by_id and by_id[id(v)] is v)
    _HOLDERS[key] = (module, len(names), found)
    return found
