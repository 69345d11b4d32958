"""Ultralytics YOLOv8n and YOLO11n against the summaries ultralytics ships in its model YAMLs.

The models are built from the YAMLs inside the ultralytics package
(``DetectionModel("yolov8n.yaml")``: ultralytics maps ``yolov8n.yaml`` to ``yolov8.yaml`` and
selects scale ``n`` from the name), with ``YOLO_OFFLINE=1`` and every socket refused and recorded
so that a network access fails the test.

Reference: the comment on the scale's line of that YAML, e.g. in ``cfg/models/v8/yolov8.yaml``::

    n: [0.33, 0.25, 1024] # YOLOv8n summary: 129 layers, 3157200 parameters, 3157184 gradients,
                          #   8.9 GFLOPS

* ``parameters`` counts every parameter of the unfused model (``model.info()`` sums
  ``p.numel()`` over ``model.parameters()``), including the 16 weights of the Detect head's
  frozen DFL convolution; ``gradients`` is the same without the frozen ones (3157200 - 16).
  pytest-graphbudget's ``params`` counts all parameters, so it is compared with ``parameters``,
  exactly. (Fusing conv+BN would change the count: the comment describes the unfused model.)
* ``GFLOPs`` is 2 x thop's count. thop counts convolution MACs and, besides them, batch-norm
  and conv-bias work as "ops", and it does not see functional matmuls (YOLO11's C2PSA
  attention). The figure is also rounded to 0.1 GFLOPs (+-0.6 % at 8.9). So it is a contraction
  count only up to those terms, hence the 2.5 % tolerance against ``flops_contraction``; the exact
  contraction check is against PyTorch's FlopCounterMode, which prices every op these models
  contract with (convolutions; YOLO11's attention is ``@``, i.e. bmm).
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from pytest_graphbudget import profile_model  # noqa: E402

GFLOPS_TOLERANCE = 0.025
MODELS = ["yolov8n.yaml", "yolo11n.yaml"]


@pytest.fixture(scope="module")
def ultralytics_offline(tmp_path_factory):
    """Import ultralytics with its network features off and its settings in a temp dir."""
    saved = {k: os.environ.get(k) for k in ("YOLO_OFFLINE", "YOLO_AUTOINSTALL", "YOLO_CONFIG_DIR")}
    os.environ["YOLO_OFFLINE"] = "1"
    os.environ["YOLO_AUTOINSTALL"] = "0"
    os.environ.setdefault("YOLO_CONFIG_DIR", str(tmp_path_factory.mktemp("ultralytics-config")))
    try:
        tasks = pytest.importorskip("ultralytics.nn.tasks")
        yield tasks
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def build(tasks, yaml_name: str):
    torch.manual_seed(0)
    return tasks.DetectionModel(yaml_name, verbose=False).eval()


@pytest.mark.parametrize("yaml_name", MODELS)
def test_yolo_matches_yaml_summary(
    yaml_name, ultralytics_offline, ultralytics_yaml_summary, flop_counter, rel_err, no_network
):
    ref = ultralytics_yaml_summary(yaml_name)
    model = build(ultralytics_offline, yaml_name)
    # The right scale was built: the YAML's "gradients" figure is the trainable parameters.
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == ref.gradients

    x = torch.zeros(1, 3, 640, 640)
    prof = profile_model(model, (x,))
    assert not no_network, f"network accessed: {no_network}"

    assert prof.params == ref.parameters, ref.line
    err = rel_err(prof.flops_contraction, ref.gflops * 1e9)
    assert err <= GFLOPS_TOLERANCE, (
        f"{yaml_name}: flops_contraction {prof.flops_contraction / 1e9:.3f} G vs "
        f"{ref.gflops} GFLOPs in {ref.yaml_file.name} ({err:.2%})"
    )
    assert prof.flops_contraction == 2 * prof.macs
    assert prof.flops > prof.flops_contraction  # BN, SiLU, the Detect head's decoding
    assert prof.coverage.unsupported_ops == {}

    # Exact: PyTorch's own counter prices every contraction these models run.
    counts = flop_counter(model, (x,))
    assert prof.flops_contraction == sum(counts.values()), counts
    assert not no_network, f"network accessed: {no_network}"


def test_yaml_summary_parser_reads_the_shipped_files(ultralytics_offline, ultralytics_yaml_summary):
    """The reference parser finds the right line for each scale (n and s differ)."""
    n = ultralytics_yaml_summary("yolov8n.yaml")
    s = ultralytics_yaml_summary("yolov8s.yaml")
    assert n.yaml_file.name == "yolov8.yaml" and n.scale == "n" and s.scale == "s"
    assert n.parameters < s.parameters and n.gflops < s.gflops
    assert n.gradients < n.parameters  # the frozen DFL conv
    assert ultralytics_yaml_summary("yolo11n.yaml").yaml_file.name == "yolo11.yaml"
