"""The fusion partitioner, checked against the architectures' own structure."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from pytest_graphbudget import profile_model  # noqa: E402


@pytest.fixture(scope="module")
def resnet18():
    return profile_model(torchvision.models.resnet18(), torch.randn(1, 3, 224, 224))


def test_resnet18_one_kernel_per_convolution_with_its_epilogue(resnet18):
    # ResNet-18: a stem conv, 8 basic blocks of two convs, 3 downsample convs = 20 convs.
    # Stem and every block's first conv: conv, batch norm, ReLU. Every block's second conv:
    # conv, batch norm, the residual add and the ReLU after it. Downsample: conv, batch norm.
    kinds = Counter(s.kind for s in resnet18.subgraphs)
    assert kinds["conv+bn+relu"] == 1 + 8
    assert kinds["conv+bn+add+relu"] == 8
    assert kinds["conv+bn"] == 3
    # Then the max pool after the stem, the global average pool and the classifier.
    assert kinds["max_pool"] == 1
    assert kinds["linear"] == 1
    assert sum(kinds.values()) == 20 + 1 + 1 + 1


def test_every_conv_kernel_is_named_after_its_conv_module(resnet18):
    convs = [s for s in resnet18.subgraphs if s.kind.startswith("conv")]
    modules = {s.module for s in convs}
    assert "conv1" in modules and "layer4.1.conv2" in modules and "layer2.0.downsample.0" in modules
    assert all(s.macs > 0 and s.reason for s in convs)


def test_every_node_is_in_exactly_one_subgraph(resnet18):
    members = [n for s in resnet18.subgraphs for n in s.nodes]
    assert len(members) == len(set(members)) == resnet18.coverage.nodes


def test_figures_add_up(resnet18):
    assert sum(s.flops for s in resnet18.subgraphs) == resnet18.flops
    assert sum(s.macs for s in resnet18.subgraphs) == resnet18.macs
    assert sum(s.traffic_bytes for s in resnet18.subgraphs) == resnet18.traffic_bytes
    # Every weight is read by exactly one kernel, so the kernels' weight bytes add up to the
    # weights, less the batch norms' step counters, which inference never reads.
    counters = [
        b
        for name, b in torchvision.models.resnet18().named_buffers()
        if name.endswith("num_batches_tracked")
    ]
    unread = sum(b.numel() * b.element_size() for b in counters)
    assert sum(s.bytes_weights for s in resnet18.subgraphs) == resnet18.weights_bytes - unread


def test_first_conv_traffic_by_hand(resnet18):
    # conv1 + bn1 + relu: reads the 1x3x224x224 image (602,112 bytes), the conv weight
    # 64x3x7x7 and the batch norm's weight, bias, running mean and variance (4 x 64), and
    # writes 1x64x112x112 floats once.
    stem = resnet18.subgraphs[0]
    assert stem.module == "conv1"
    assert stem.bytes_in == 3 * 224 * 224 * 4
    assert stem.bytes_weights == (64 * 3 * 7 * 7 + 4 * 64) * 4
    assert stem.bytes_out == 64 * 112 * 112 * 4


@pytest.mark.slow
def test_bert_nodes_all_partitioned_and_views_never_alone():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(num_hidden_layers=2)
    model = transformers.BertModel(config)
    ids = torch.randint(0, config.vocab_size, (1, 32))
    prof = profile_model(model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    assert prof.trace.method == "eager"
    members = [n for s in prof.subgraphs for n in s.nodes]
    assert len(members) == len(set(members)) == prof.coverage.nodes
    by_name = {n.name: n for n in prof.node_info}
    for subgraph in prof.subgraphs:
        assert subgraph.kind != "view"
        assert any(
            by_name[n].flops or by_name[n].kind not in ("view", "getitem") for n in subgraph.nodes
        )
    kinds = Counter(s.kind for s in prof.subgraphs)
    # Per layer: one fused attention kernel and two layer norms (after attention, after FFN).
    assert kinds["attention"] == 2
    assert sum(k.endswith("layer_norm") for k in (s.kind for s in prof.subgraphs)) == 1 + 2 * 2


class WriteIntoAClone(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()  # reads only an input: placed after the walk, with what it feeds
        y.copy_(x)  # into y's storage, in place: a node with no new storage
        return y.zero_()


def test_every_node_has_a_kernel_though_it_writes_in_place_after_a_deferred_one():
    """``y.copy_`` and ``zero_`` follow ``clone``, which reads only a graph input and so is
    placed after the walk: they had been left out of every kernel (and so out of its time)."""
    profile = profile_model(WriteIntoAClone(), (torch.randn(4, 4),), tier="eager")
    assert {n.name: n.subgraph >= 0 for n in profile.node_info} == dict.fromkeys(
        ["clone", "copy", "zero"], True
    )


class Noise(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.randn(64, 256)  # reads nothing: the taped forward's only op


def test_a_forward_of_factories_alone_is_a_kernel_not_an_estimate_of_0():
    """A factory joins the kernel that reads it; with none, it had been left out of every
    kernel: its subgraph -1, the estimate 0 (FX folds it into a constant: an empty graph,
    which the gate fails)."""
    profile = profile_model(Noise(), (torch.randn(4, 4),), tier="eager")
    assert [(n.name, n.subgraph) for n in profile.node_info] == [("randn", 0)]
    assert profile.est_latency_s > 0
    assert profile.subgraphs[0].bytes_out == 64 * 256 * 4  # the 64 KB it writes
