"""Files and folders on disk (``zoo/local.py``): pickles refused unless trusted, checkpoints
loaded with ``weights_only``, ``config.json`` folders, model YAMLs and ``.pt2`` exports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ultralytics_safe_load

torch = pytest.importorskip("torch")

from pytest_graphbudget.errors import GraphBudgetError  # noqa: E402
from pytest_graphbudget.zoo import resolve  # noqa: E402


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def shapes(case) -> dict[str, tuple[int, ...]]:
    return {key: tuple(value.shape) for key, value in case.kwargs.items()}


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return self.conv(x).relu()


def test_full_pickle_is_refused_without_trust(tmp_path):
    path = tmp_path / "tiny.pt"
    torch.save(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()), path)
    with pytest.raises(GraphBudgetError) as info:
        resolve(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert "full pickle" in message and "trust_pickle=True" in message
    case = resolve(str(path), trust_pickle=True, input_shape=(1, 3, 32, 32))
    assert isinstance(case.model, torch.nn.Sequential)
    assert tuple(case.inputs[0].shape) == (1, 3, 32, 32)


def test_full_pickle_names_the_projects_classes_first_in_every_process(tmp_path):
    # torch's finder returns the globals in a set's order (string hashes differ between
    # processes): the message must not, and the user's class is the one that matters
    path = tmp_path / "tiny.pt"
    torch.save(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()), path)
    code = (
        "from pytest_graphbudget.zoo import resolve\n"
        f"try:\n    resolve({str(path)!r})\nexcept Exception as exc:\n    print(exc)"
    )
    lines = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    # torch 2.4 has no finder: its unpickler's error names the first global it met, one only
    shown = "torch.nn.modules.activation.ReLU, torch.nn.modules.container.Sequential"
    if not hasattr(torch.serialization, "get_unsafe_globals_in_checkpoint"):
        shown = "torch.nn.modules.container.Sequential"
    assert lines == {
        f"{path} is a full pickle ({shown}); loading it runs code from the file. "  # two by name
        "Pass trust_pickle=True (--trust-pickle) if you trust it"
    }


def test_trusted_pickle_without_a_shape_asks_for_one(tmp_path):
    path = tmp_path / "tiny.pt"
    torch.save(torch.nn.Sequential(torch.nn.Linear(4, 4)), path)
    with pytest.raises(GraphBudgetError, match="pass input_shape"):
        resolve(str(path), trust_pickle=True)


def test_state_dict_is_refused(tmp_path):
    path = tmp_path / "weights.pth"
    torch.save(torch.nn.Linear(4, 4).state_dict(), path)
    with pytest.raises(GraphBudgetError, match="holds a state dict"):
        resolve(str(path))


def test_garbage_pt_file_is_a_clear_error(tmp_path):
    path = tmp_path / "broken.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(GraphBudgetError) as info:
        resolve(str(path))
    assert "\n" not in str(info.value)


def test_ultralytics_checkpoint_loads_with_weights_only_safety(tmp_path, no_network):
    from pytest_graphbudget.zoo.ultralytics import import_ultralytics

    if not ultralytics_safe_load():  # torch 2.4: refused in one line unless trusted (below)
        pytest.skip("ultralytics' weights_only loader needs torch 2.5")

    tasks = import_ultralytics().nn.tasks
    model = tasks.DetectionModel(cfg="yolov8n.yaml", verbose=False)
    path = tmp_path / "best.pt"
    torch.save({"model": model, "epoch": 3}, path)

    # The file references ultralytics classes, so a plain weights_only load refuses it (until
    # ultralytics' safe loader, which the zoo uses, has registered them for the life of the
    # process: another test of this worker may have loaded a checkpoint first)...
    known = [g[0] if isinstance(g, tuple) else g for g in torch.serialization.get_safe_globals()]
    if tasks.DetectionModel not in known:  # ultralytics registers (class, "module.Name") pairs
        with pytest.raises(Exception, match="ultralytics"):
            torch.load(path, weights_only=True)
    # ...but the zoo loads it with weights_only=True against ultralytics' class allow-list.
    case = resolve(str(path))
    assert type(case.model).__name__ == "DetectionModel"
    assert n_params(case.model) == 3_157_200
    assert [tuple(x.shape) for x in case.inputs] == [(1, 3, 640, 640)]
    assert no_network == []


def write_bert_folder(folder, **overrides):
    config = {
        "model_type": "bert",
        "vocab_size": 1000,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "max_position_embeddings": 128,
        "type_vocab_size": 2,
        **overrides,
    }
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_folder_with_config_json(tmp_path, no_network):
    # The folder's name says "gpt2": the inputs still come from BERT's forward.
    folder = write_bert_folder(tmp_path / "gpt2-like")
    case = resolve(str(folder), seq_len=16)
    assert type(case.model).__name__ == "BertModel"
    embeddings = 1000 * 64 + 128 * 64 + 2 * 64 + 2 * 64
    layer = 4 * (64 * 64 + 64) + 2 * 64 + (64 * 128 + 128) + (128 * 64 + 64) + 2 * 64
    assert n_params(case.model) == embeddings + 2 * layer + (64 * 64 + 64)
    assert shapes(case) == {
        "input_ids": (1, 16),
        "attention_mask": (1, 16),
        "token_type_ids": (1, 16),
    }
    assert no_network == []


def test_folder_needing_remote_code_is_refused(tmp_path):
    folder = write_bert_folder(tmp_path / "custom", auto_map={"AutoModel": "modeling.Custom"})
    with pytest.raises(GraphBudgetError, match="trust_remote_code"):
        resolve(str(folder))


def test_yaml_file_builds_an_ultralytics_model(tmp_path, no_network):
    from pytest_graphbudget.zoo.ultralytics import yaml_file

    path = tmp_path / "mynet.yaml"
    path.write_text(yaml_file("yolov8").read_text().replace("nc: 80", "nc: 3"))
    case = resolve(str(path), meta=True)
    assert type(case.model).__name__ == "DetectionModel"
    assert case.model.yaml["nc"] == 3


def test_exported_program_carries_its_inputs(tmp_path):
    program = torch.export.export(Tiny().eval(), (torch.randn(1, 3, 16, 16),))
    path = tmp_path / "tiny.pt2"
    torch.export.save(program, path)
    case = resolve(str(path))
    assert [tuple(x.shape) for x in case.inputs] == [(1, 3, 16, 16)]


def save_trained(path, imgsz, train_args: bool = True):
    """A checkpoint as ultralytics' trainer writes it: the EMA model with the namespace of its
    arguments attached (``model.args``), and those arguments again as ``train_args``."""
    from pytest_graphbudget.zoo.ultralytics import import_ultralytics

    ultralytics = import_ultralytics()
    model = ultralytics.nn.tasks.DetectionModel(cfg="yolov8n.yaml", nc=3, verbose=False)
    model.args = ultralytics.utils.IterableSimpleNamespace(imgsz=imgsz, task="detect")
    checkpoint = {"ema": model, "model": None, "epoch": 3}
    if train_args:
        checkpoint["train_args"] = {"imgsz": imgsz, "task": "detect", "epochs": 3}
    torch.save(checkpoint, path)
    return path


def test_ultralytics_checkpoint_is_profiled_at_the_imgsz_it_was_trained_at(
    tmp_path, monkeypatch, no_network
):
    # User trial: a checkpoint trained at 320 was profiled at 640, with or without trust.
    from pytest_graphbudget.zoo.ultralytics import import_ultralytics

    path = save_trained(tmp_path / "trained320.pt", 320)
    monkeypatch.chdir(tmp_path)  # ultralytics' loader may write next to the file: keep it here
    model, _ = import_ultralytics().nn.tasks.load_checkpoint(str(path))
    assert model.args["imgsz"] == 320  # ultralytics' own reading of the checkpoint
    safe = ultralytics_safe_load()  # else (torch 2.4) only a trusted file loads
    for trust in (False, True) if safe else (True,):
        case = resolve(str(path), trust_pickle=trust)
        assert [tuple(x.shape) for x in case.inputs] == [(1, 3, 320, 320)], trust
    # without train_args, the namespace the trainer attaches to the model says it (trusted on
    # torch 2.4, where the safe loader is unavailable, it had read 640: ultralytics'
    # load_checkpoint replaces that namespace with its defaults)
    bare = save_trained(tmp_path / "trained256.pt", [256, 320], train_args=False)
    for trust in (False, True) if safe else (True,):
        inputs = resolve(str(bare), trust_pickle=trust).inputs
        assert [tuple(x.shape) for x in inputs] == [(1, 3, 256, 320)], trust
    # input_shape still wins
    shaped = resolve(str(path), input_shape=(1, 3, 64, 64), trust_pickle=not safe)
    assert [tuple(x.shape) for x in shaped.inputs] == [(1, 3, 64, 64)]
    assert no_network == []


def test_a_budget_files_model_path_is_relative_to_the_project_root(tmp_path, monkeypatch):
    # User trial: `cd tests && pytest --graph-budget ../budgets` read "cfg_llama" from tests/.
    from pytest_graphbudget.errors import UnknownModelError
    from pytest_graphbudget.zoo import at_root

    write_bert_folder(tmp_path / "cfg_llama")
    (tmp_path / "weights").mkdir()
    torch.save(torch.nn.Linear(4, 4).state_dict(), tmp_path / "weights" / "best.pt")
    (tmp_path / "tests").mkdir()
    torch.save(torch.nn.Linear(4, 4).state_dict(), tmp_path / "tests" / "only_here.pt")
    monkeypatch.chdir(tmp_path / "tests")
    assert at_root("cfg_llama", tmp_path) == os.path.join("..", "cfg_llama")
    assert at_root("weights/best.pt", tmp_path) == os.path.join("..", "weights", "best.pt")
    for name in ("resnet18", "yolov8n.pt", "EleutherAI/gpt-neo-125m", "timm:resnet50"):
        assert at_root(name, tmp_path) == name  # zoo names, as written
    assert at_root(str(tmp_path / "cfg_llama"), tmp_path) == str(tmp_path / "cfg_llama")
    for missing in ("weights/yolov8n.pt", "./cfg_gpt2", "only_here.pt"):
        with pytest.raises(UnknownModelError) as info:
            at_root(missing, tmp_path)
        assert str(info.value) == (
            f"{missing}: no such file or directory in the project's root {tmp_path} (a model "
            "path in a budget file is relative to the root, wherever the run starts)"
        )
    monkeypatch.chdir(tmp_path)  # from the root, paths are as written
    assert at_root("cfg_llama", tmp_path) == "cfg_llama"
