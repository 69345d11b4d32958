"""Ultralytics YOLO by name (``zoo/ultralytics.py``): built from the model YAMLs ultralytics
ships, offline, with the parameter counts printed in their comments."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_graphbudget.zoo import list_models, resolve  # noqa: E402


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_every_scale_of_every_family_is_listed():
    listed = set(list_models()["ultralytics"])
    assert len(listed) == 25
    for family in ("yolov5", "yolov8", "yolo11", "yolo12", "yolo26"):
        tail = "u" if family == "yolov5" else ""
        assert {f"{family}{s}{tail}" for s in "nsmlx"} <= listed


@pytest.mark.parametrize(
    "name, family, scale",
    [
        ("yolov8n", "yolov8", "n"),
        ("yolov8s", "yolov8", "s"),
        ("yolo11n", "yolo11", "n"),
        ("yolo12n", "yolo12", "n"),
        ("yolo26n", "yolo26", "n"),
    ],
)
def test_yolo_params_equal_the_yaml_comment(name, family, scale, no_network):
    from pytest_graphbudget.zoo.ultralytics import published_params

    # e.g. "n: [0.50, 0.25, 1024] # summary: 272 layers, 2,602,288 parameters, ..."
    expected = published_params(family, scale)
    assert expected is not None
    case = resolve(name, meta=True)
    assert n_params(case.model) == expected
    assert [tuple(x.shape) for x in case.inputs] == [(1, 3, 640, 640)]
    assert no_network == []


def test_yolov5u_names(no_network):
    # yolov5.yaml has no summary comments; ultralytics publishes 2.6M for YOLOv5nu.
    assert n_params(resolve("yolov5nu", meta=True).model) == 2_654_816
    assert resolve("yolov5n", meta=True).name == "yolov5nu"  # ultralytics' own renaming


def test_missing_pt_name_falls_back_to_its_yaml(tmp_path, monkeypatch, no_network):
    monkeypatch.chdir(tmp_path)
    case = resolve("yolov8n.pt", meta=True)
    assert case.name == "yolov8n"
    assert case.note == (
        "yolov8n.pt not found; built from yolov8n.yaml (FLOPs do not depend on weights)"
    )
    assert n_params(case.model) == 3_157_200
    assert list(tmp_path.iterdir()) == []  # nothing downloaded or written
    assert no_network == []


@pytest.mark.parametrize("path", ["weights/yolov8n.pt", "./yolov8n.pt", "cfg/yolo11s.yaml"])
def test_a_missing_file_path_is_an_error_never_the_zoo_model(path, tmp_path, monkeypatch):
    # User trial: a path to a checkpoint that is not there read as the zoo's yolov8n, with only
    # a note; a path names a file, and a missing file is a one-line error naming it.
    from pytest_graphbudget.errors import UnknownModelError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnknownModelError) as info:
        resolve(path, meta=True)
    assert (
        str(info.value) == f"{path}: no such file or directory, and not a model name the zoo knows"
    )
