"""The same figures on every torch: about 30 profiles that cover the engine, against a golden file.

``tests/golden/figures.json`` holds, for each case below, the figures the pinned torch gives
(MACs, FLOPs, params, peak memory, traffic and weight bytes, subgraph count, tier). Every torch
release of ``make compat``'s matrix must reproduce them exactly, or the difference is listed in
``tests/golden/differences.toml`` for that release with its reason (and shown in
docs/compat.md, which a test here keeps in step): a figure that moves with torch is never
silent. The golden file guards equality across versions; that the figures are right is what
the rest of the suite checks against independent references, and ``test_golden_is_anchored``
ties a few golden rows to such references (torchvision's published parameter counts and MACs,
closed-form transformer counts) so that the file itself cannot drift from them.

Regenerate, on the pinned torch only, after a change that is meant to move figures::

    python tests/test_golden.py --write     # or: make golden
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "figures.json"
DIFFERENCES = HERE / "golden" / "differences.toml"
DOCS = HERE.parent / "docs" / "compat.md"
FIGURES = (
    "macs",
    "flops",
    "params",
    "peak_memory_bytes",
    "traffic_bytes",
    "weights_bytes",
    "subgraphs",
    "tier",
)

CASES: dict[str, Callable] = {}
NEEDS: dict[str, tuple[str, ...]] = {}  # case -> the optional packages it imports


def case(*needs: str):
    def add(fn: Callable) -> Callable:
        CASES[fn.__name__] = fn
        NEEDS[fn.__name__] = needs
        return fn

    return add


def figures(prof) -> dict:
    return {
        "macs": prof.macs,
        "flops": prof.flops,
        "params": prof.params,
        "peak_memory_bytes": prof.peak_memory_bytes,
        "traffic_bytes": prof.traffic_bytes,
        "weights_bytes": prof.weights_bytes,
        "subgraphs": len(prof.subgraphs),
        "tier": prof.trace.method,
    }


def _profile(model, *inputs, **options):
    from pytest_graphbudget import profile_model

    return profile_model(model, inputs or None, **options)


def _seeded(build: Callable):
    import torch

    torch.manual_seed(0)
    return build()


# --- TorchVision: classification, detection, a dtype -------------------------------------


@case("torchvision")
def resnet18():
    return _profile("resnet18")


@case("torchvision")
def mobilenet_v3_small():
    return _profile("mobilenet_v3_small")


@case("torchvision")
def efficientnet_b0():
    return _profile("efficientnet_b0")


@case("torchvision")
def vit_b_16_bfloat16():
    return _profile("vit_b_16", dtype="bfloat16")


@case("torchvision")
def fasterrcnn_mobilenet_v3_large_320_fpn():
    return _profile("fasterrcnn_mobilenet_v3_large_320_fpn")


@case("torchvision")
def mobilenet_v2_train_adam():
    return _profile("mobilenet_v2", mode="train", optimizer="adam", batch=2)


@case("torchvision")
def resnet18_int8():
    return _profile("resnet18", dtype="int8")


# --- Hugging Face: encoder, decoder, encoder-decoder, decode, meta ------------------------


@case("transformers")
def bert_base_uncased():
    return _profile("bert-base-uncased", seq_len=128)


@case("transformers")
def gpt2():
    return _profile("gpt2", seq_len=128)


@case("transformers")
def t5_small():
    return _profile("t5-small", seq_len=64)


@case("transformers")
def gpt2_train_sgd():
    import transformers

    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=1000, bos_token_id=0, eos_token_id=0
    )
    model = _seeded(lambda: transformers.GPT2LMHeadModel(config))
    import torch

    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(0))
    return _profile(model, ids, mode="train", optimizer="sgd")


@case("transformers")
def gpt2_decode_kv_cache():
    """One generated token after 32 cached positions (the decode step's figures)."""
    import transformers

    from pytest_graphbudget import profile_decode

    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=1000, bos_token_id=0, eos_token_id=0
    )
    model = _seeded(lambda: transformers.GPT2LMHeadModel(config)).eval()
    return profile_decode(model, context=32).decode


@case("transformers")
def llama_meta():
    """A small grouped-query Llama built on the meta device: nothing allocated, taped."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=100, max_position_embeddings=64,
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    return _profile(model, torch.zeros(1, 16, dtype=torch.long))


# --- YOLO ----------------------------------------------------------------------------------


@case("ultralytics")
def yolov8n():
    return _profile("yolov8n")


# --- Modules built here: attention, recurrent, out= ops, small blocks ----------------------


def _module(forward: Callable, **children):
    """An nn.Module whose forward is ``forward(self, *inputs)``, with ``children`` as layers."""
    import torch

    cls = type("Block", (torch.nn.Module,), {"forward": forward})
    module = cls()
    for name, child in children.items():
        setattr(module, name, child)
    return module.eval()


@case()
def sdpa_causal():
    import torch
    import torch.nn.functional as F

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    q = torch.randn(2, 4, 32, 16)
    return _profile(_module(forward), q, q.clone(), q.clone())


@case()
def sdpa_masked():
    import torch
    import torch.nn.functional as F

    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    q = torch.randn(2, 4, 32, 16)
    mask = torch.ones(32, 32, dtype=torch.bool).tril()
    return _profile(_module(forward), q, q.clone(), q.clone(), mask)


@case()
def multihead_attention():
    import torch

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]

    attn = _seeded(lambda: torch.nn.MultiheadAttention(64, 4, batch_first=True))
    return _profile(_module(forward, attn=attn), torch.randn(2, 16, 64))


@case()
def transformer_encoder_layer():
    import torch

    layer = _seeded(lambda: torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True))
    return _profile(layer.eval(), torch.randn(2, 16, 64))


@case()
def lstm_bidirectional():
    import torch

    def forward(self, x):
        return self.rnn(x)[0]

    rnn = _seeded(lambda: torch.nn.LSTM(32, 48, num_layers=2, bidirectional=True))
    return _profile(_module(forward, rnn=rnn), torch.randn(10, 3, 32))


@case()
def gru():
    import torch

    def forward(self, x):
        return self.rnn(x)[0]

    rnn = _seeded(lambda: torch.nn.GRU(32, 48, batch_first=True))
    return _profile(_module(forward, rnn=rnn), torch.randn(3, 10, 32))


@case()
def out_variants():
    """``out=`` ops write into tensors given to the forward: priced as the plain op."""
    import torch

    def forward(self, x, y, buf, res):
        torch.mm(x, y, out=buf)
        torch.add(buf, 1.0, out=buf)
        torch.addmm(buf, x, y, out=res)
        return res

    x, y = torch.randn(20, 30), torch.randn(30, 40)
    return _profile(_module(forward), x, y, torch.empty(20, 40), torch.empty(20, 40))


@case()
def conv_transpose_decoder_train():
    import torch

    decoder = _seeded(
        lambda: torch.nn.Sequential(
            torch.nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(8, 3, 4, stride=2, padding=1),
        )
    )
    return _profile(decoder, torch.randn(2, 16, 16, 16), mode="train", optimizer="adam")


@case()
def depthwise_groupnorm_gelu():
    import torch

    block = _seeded(
        lambda: torch.nn.Sequential(
            torch.nn.Conv2d(32, 32, 3, padding=1, groups=32),
            torch.nn.GroupNorm(4, 32),
            torch.nn.GELU(),
            torch.nn.Conv2d(32, 64, 1),
            torch.nn.AdaptiveAvgPool2d(1),
        )
    )
    return _profile(block.eval(), torch.randn(2, 32, 28, 28))


@case()
def conv1d_layernorm_softmax():
    import torch

    def forward(self, x):
        y = self.conv(x).transpose(1, 2)
        return torch.softmax(self.norm(y), dim=-1)

    conv = _seeded(lambda: torch.nn.Conv1d(8, 16, 5, padding=2))
    return _profile(_module(forward, conv=conv, norm=torch.nn.LayerNorm(16)), torch.randn(4, 8, 50))


@case()
def embedding_bag_mlp():
    import torch

    def forward(self, ids, offsets):
        return self.mlp(self.bag(ids, offsets))

    bag = _seeded(lambda: torch.nn.EmbeddingBag(1000, 32, mode="mean"))
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.SiLU(), torch.nn.Linear(64, 8))
    ids = torch.randint(0, 1000, (40,), generator=torch.Generator().manual_seed(0))
    return _profile(_module(forward, bag=bag, mlp=mlp), ids, torch.tensor([0, 10, 25]))


@case()
def einsum_bmm_float16():
    import torch

    def forward(self, a, b):
        return torch.einsum("bij,bjk->bik", a, b) + torch.bmm(a, b)

    return _profile(_module(forward), torch.randn(4, 16, 32), torch.randn(4, 32, 8),
                    dtype="float16")  # fmt: skip


@case()
def mlp_train_adam_cross_entropy():
    import torch

    def build():
        layers = (torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Dropout(0.1))
        return torch.nn.Sequential(*layers, torch.nn.Linear(128, 10))

    mlp = _seeded(build)
    target = torch.arange(8) % 10

    def loss(out):
        return torch.nn.functional.cross_entropy(out, target)

    return _profile(mlp, torch.randn(8, 64), mode="train", optimizer="adam", loss=loss)


@case()
def data_dependent_taped():
    """A forward FX cannot trace (Python reads a tensor's value): the taped tier."""
    import torch

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            y = torch.relu(y)
        return y @ y.T

    fc = _seeded(lambda: torch.nn.Linear(16, 16))
    return _profile(_module(forward, fc=fc), torch.randn(8, 16))


# --- the golden file -------------------------------------------------------------------------


def run(name: str) -> dict:
    return figures(CASES[name]())


def load_golden() -> dict:
    return json.loads(GOLDEN.read_text())


def load_differences() -> list[dict]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    return tomllib.loads(DIFFERENCES.read_text()).get("difference", [])


def torch_minor() -> str:
    import torch

    return ".".join(str(torch.__version__).split("+")[0].split(".")[:2])


def explained(name: str, figure: str, got, minor: str, differences: list[dict]) -> dict | None:
    """The listed difference that accounts for ``got``, or None."""
    for entry in differences:
        if entry["case"] == name and entry["figure"] == figure and minor in entry["torch"]:
            if entry["value"] == got:
                return entry
    return None


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_figures(name):
    for package in NEEDS[name]:  # a row without torchvision (nor then YOLO) skips these
        pytest.importorskip(package)
    golden = load_golden()["cases"]
    assert name in golden, f"{name} has no golden row: run `make golden` on the pinned torch"
    got = run(name)
    minor, differences = torch_minor(), load_differences()
    unexplained = [
        f"{figure}: golden {golden[name][figure]!r}, torch {minor} gives {got[figure]!r}"
        for figure in FIGURES
        if got[figure] != golden[name][figure]
        and not explained(name, figure, got[figure], minor, differences)
    ]
    assert not unexplained, (
        f"{name} moved on torch {minor}; list each difference with its reason in "
        f"{DIFFERENCES.relative_to(HERE.parent)} (or fix it): " + "; ".join(unexplained)
    )


def test_golden_file_lists_every_case_and_nothing_else():
    golden = load_golden()
    assert sorted(golden["cases"]) == sorted(CASES)
    for name, row in golden["cases"].items():
        assert sorted(row) == sorted(FIGURES), name
        assert row["macs"] > 0 or name == "data_dependent_taped" or row["flops"] > 0, name


def test_every_difference_names_a_case_a_figure_a_release_and_a_reason():
    for entry in load_differences():
        assert entry["case"] in CASES, entry
        assert entry["figure"] in FIGURES, entry
        assert entry["torch"] and all(re.fullmatch(r"2\.\d+", t) for t in entry["torch"]), entry
        assert len(entry["reason"]) > 20, entry


BEGIN, END = "<!-- differences: begin -->", "<!-- differences: end -->"


def differences_table(differences: list[dict]) -> str:
    """docs/compat.md's table of the listed differences, as ``make golden`` writes it."""
    rows = ["| case | figure | torch | value | reason |", "| --- | --- | --- | ---: | --- |"]
    for e in differences:
        torch = ", ".join(e["torch"])
        rows.append(f"| {e['case']} | {e['figure']} | {torch} | {e['value']:,} | {e['reason']} |")
    if not differences:
        rows.append("| (none) | | | | every release gives the golden figures |")
    return "\n".join(rows)


def docs_with_table(text: str, differences: list[dict]) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{differences_table(differences)}\n{END}{tail}"


def test_docs_show_every_difference_as_listed():
    """docs/compat.md's table is the one differences.toml gives: it cannot drift or drop one."""
    text = DOCS.read_text()
    assert BEGIN in text and END in text, f"docs/compat.md lost its {BEGIN} markers"
    assert text == docs_with_table(text, load_differences()), (
        "docs/compat.md's table of differences is stale: run `make golden`"
    )


def test_golden_is_anchored():
    """Golden rows equal independent references: torchvision's published metadata (params
    exactly, MACs to the published 3 decimals of GMACs) and the closed-form count of the small
    Llama (tests/engine/test_meta_tape.py derives each term)."""
    golden = load_golden()["cases"]
    tv = pytest.importorskip("torchvision")
    for name in ("resnet18", "mobilenet_v3_small", "efficientnet_b0"):
        meta = tv.models.get_model_weights(name).DEFAULT.meta
        assert golden[name]["params"] == meta["num_params"], name
        assert round(golden[name]["macs"] / 1e9, 3) == pytest.approx(meta["_ops"], abs=1e-3)
    # Llama, s=16, h=64, f=176, 4 heads of 16, 2 kv heads, 2 layers, vocab 100.
    s, h, f, kv, layers, vocab = 16, 64, 176, 32, 2, 100
    macs = layers * (2 * s * h * h + 2 * s * h * kv + 3 * s * h * f + 2 * s * s * h) + s * h * vocab
    assert golden["llama_meta"]["macs"] == macs == 1_642_496
    # One decoded token after 32 cached positions of GPT-2 (2 layers, h=64, vocabulary 1000):
    # per layer QKV 3h^2, projection h^2, MLP 8h^2, attention 2(N+1)h; then the LM head h*V.
    decode = 2 * (12 * 64 * 64 + 2 * 33 * 64) + 64 * 1000
    assert golden["gpt2_decode_kv_cache"]["macs"] == decode == 170_752
    # LSTM, 2 bidirectional layers of 48 over 32 inputs, 10 steps, batch 3: 4 gates of
    # 48 x (inputs + 48) per step and direction; GRU: 3 gates.
    lstm = 2 * 30 * 4 * 48 * (32 + 48) + 2 * 30 * 4 * 48 * (96 + 48)
    assert golden["lstm_bidirectional"]["macs"] == lstm
    assert golden["gru"]["macs"] == 30 * 3 * 48 * (32 + 48)
    # out_variants: mm and addmm of 20x30 by 30x40, 24,000 MACs each.
    assert golden["out_variants"]["macs"] == 2 * 20 * 30 * 40
    # sdpa_masked, q, k and v 2x4x32x16 float32 (16,384 B each), a 32x32 bool mask: SDPA first
    # turns the mask into an additive float one (a where: reads 1,024 B, writes 4,096, one FLOP
    # an element), then its CPU flash kernel reads q, k, v and that mask and writes the output
    qkv, mask, out = 3 * 16384, 32 * 32, 16384
    assert golden["sdpa_masked"]["traffic_bytes"] == (mask + 4 * mask) + (qkv + 4 * mask + out)
    assert golden["sdpa_masked"]["subgraphs"] == 2
    # conv1d_layernorm_softmax's peak, during the norm (as the profiler measures it): the conv's
    # output (4x16x50 floats, held by the local ``y``), the contiguous copy the CPU kernel
    # normalizes (``y`` is transposed), the norm's output and its mean and rstd (4x50 floats
    # each), besides the input and weights.
    acts, stats = 3 * 4 * 16 * 50 * 4, 2 * 4 * 50 * 4
    weights = 4 * (16 * 8 * 5 + 16 + 16 + 16)
    assert (
        golden["conv1d_layernorm_softmax"]["peak_memory_bytes"]
        == acts + stats + 4 * 4 * 8 * 50 + weights
    )
    # Its traffic: mm reads x (20x30) and y (30x40) and writes buf (20x40, read by addmm), the
    # add in place on buf fuses with it; addmm reads buf, x and y and writes res, the output.
    # An out= buffer is written, never read: float32 throughout.
    x, y, buf = 4 * 20 * 30, 4 * 30 * 40, 4 * 20 * 40
    assert golden["out_variants"]["traffic_bytes"] == (x + y + buf) + (buf + x + y + buf)


def write_docs() -> None:
    DOCS.write_text(docs_with_table(DOCS.read_text(), load_differences()))
    print(f"wrote {DOCS}")


def write() -> None:
    import torch

    sys.path.insert(0, str(HERE.parent / "benchmarks"))
    from compat import PINNED_TORCH

    if torch_minor() != PINNED_TORCH:
        sys.exit(
            f"golden figures come from the pinned torch {PINNED_TORCH}, not {torch.__version__}"
        )
    cases = {}
    for name in sorted(CASES):
        cases[name] = run(name)
        print(name, cases[name], flush=True)
    body = {"torch": str(torch.__version__).split("+")[0], "cases": cases}
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    if sys.argv[1:] not in (["--write"], ["--docs"]):
        sys.exit("usage: python tests/test_golden.py --write | --docs")
    if sys.argv[1:] == ["--write"]:
        write()
    write_docs()
