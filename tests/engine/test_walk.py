"""One walk of the model's modules a profile (``engine/walk.py``), and storage keys as ints
(``extents.StorageKey``): the same answers as torch's own walks and weak references."""

from __future__ import annotations

import gc

import torch
from torch import nn

from pytest_graphbudget import profile_model
from pytest_graphbudget.engine import walk
from pytest_graphbudget.engine.extents import StorageKey


def _shared() -> nn.Module:
    """A module at two paths (one activation, and a block reused), a weight tied to another."""
    act = nn.ReLU()
    block = nn.Sequential(nn.Linear(4, 4), act)
    model = nn.Sequential(block, nn.Linear(4, 4), act, block, nn.Linear(4, 4))
    model[4].weight = model[1].weight
    model.register_buffer("scale", torch.ones(4))
    return model


def test_the_walk_answers_as_torch_does_inside_and_outside_a_profile():
    model = _shared()
    expected = {
        "named": list(model.named_modules(remove_duplicate=False)),
        "unique": list(model.named_modules()),
        "params": list(model.named_parameters(remove_duplicate=False)),
        "unique_params": list(model.named_parameters()),
        "buffers": list(model.named_buffers(remove_duplicate=False)),
    }

    def answers() -> dict:
        return {
            "named": walk.named_modules(model),
            "unique": walk.unique_modules(model),
            "params": walk.named_tensors(model, "_parameters"),
            "unique_params": walk.named_tensors(model, "_parameters", unique=True),
            "buffers": walk.named_tensors(model, "_buffers"),
        }

    def same(found: dict) -> None:
        for key, pairs in expected.items():
            assert [(n, id(v)) for n, v in found[key]] == [(n, id(v)) for n, v in pairs], key

    same(answers())
    with walk.walking(model):
        same(answers())
        assert walk.named_modules(model) is walk.named_modules(model)  # walked once
        assert walk.modules(model) == list(model.modules())
    assert len(expected["unique"]) < len(expected["named"])  # the model does share modules
    assert len(expected["unique_params"]) < len(expected["params"])  # and ties a weight


def test_a_module_added_by_a_forward_is_walked_after_it():
    class Grows(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not hasattr(self, "second"):
                self.second = nn.Linear(4, 8)  # lazy state that is a module
            return self.second(self.first(x))

    model = Grows()
    prof = profile_model(model, (torch.ones(1, 4),))
    assert prof.params == 4 * 4 + 4 + 4 * 8 + 8  # the module the forward built is counted
    assert prof.macs == 4 * 4 + 4 * 8


def test_storage_keys_are_one_per_storage_and_outlive_it():
    x = torch.ones(8)
    view = x[2:]
    key, again = StorageKey(x.untyped_storage()), StorageKey(view.untyped_storage())
    other = StorageKey(torch.ones(8).untyped_storage())
    assert key == again and hash(key) == hash(again) and len({key, again, other}) == 2
    assert not torch.UntypedStorage._expired(key)
    del x, view
    gc.collect()
    assert torch.UntypedStorage._expired(key)  # freed, and the key says so
    # while a key lives, no new storage takes its address
    assert all(StorageKey(torch.ones(8).untyped_storage()) != key for _ in range(50))


def test_module_paths_read_from_every_source_form_dynamo_writes():
    """A module's path from the source Dynamo records in ``nn_module_stack``: torch 2.4's strict
    export writes ``getattr(L['fn'], '0')``, which the per-layer table had shown whole, each
    layer of a Sequential under its own name and its MACs under none."""
    from pytest_graphbudget.engine.walk import module_path

    assert module_path("getattr(L['fn'], '0')") == "0"
    assert module_path("getattr(getattr(L['fn'], 'layer1'), '0').conv1") == "layer1.0.conv1"
    assert module_path("L['self'].backbone.body._modules['0'][1]") == "backbone.body.0.1"
    assert module_path("L['fn']") == ""
    assert module_path("layer1.0.downsample") == "layer1.0.downsample"  # a plain path as it is


def test_a_module_in_a_plain_container_is_found_beside_other_values():
    """Containers are read by the types they hold (LeViT keeps 38,416 attention indices in a
    plain list a layer, read item by item three times a profile: a fifth of it); a module
    beside numbers, or under a key of a dict, is found all the same, and a list of numbers
    holds none."""
    model = nn.Sequential(nn.Linear(2, 2))
    extra = nn.Linear(2, 3)
    model[0].indices = list(range(40_000))
    model[0].mixed = [1, "two", extra]
    model[0].table = {"scale": 2.0, "head": extra}
    found = [(attribute, path) for attribute, path, _ in walk.unregistered(model)]
    assert found == [("0.mixed", "0.mixed.2"), ("0.table", "0.table.head")]
