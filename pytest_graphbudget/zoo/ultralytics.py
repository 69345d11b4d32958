"""Ultralytics YOLO detection models, built from the model YAMLs that ultralytics ships.

Names: ``yolov5{n,s,m,l,x}u``, ``yolov8{n..x}``, ``yolo11{n..x}``, ``yolo12{n..x}`` and
``yolo26{n..x}``. The letter picks the scale row of the family's YAML (``yolov8n`` ->
``cfg/models/v8/yolov8.yaml``, scale ``n``), exactly as ultralytics does. ``yolov5n`` is read as
``yolov5nu`` (ultralytics renames it the same way), and ``.yaml``/``.pt`` suffixes are accepted.

A ``.pt`` name that is not on disk (``yolov8n.pt``) is built from its YAML, with a note: FLOPs do
not depend on weights. A ``.pt`` file that exists is loaded by ``local.py``. A path with a folder
(``weights/yolov8n.pt``, ``./yolov8n.yaml``) names a file, never this zoo's model: when it is not
there, no loader takes it, and the zoo says the file does not exist.

Nothing here touches the network: ``YOLO_OFFLINE`` is set (unless the user set it) before
ultralytics is imported, so its import-time connectivity check and asset downloads are off,
and the YAML is read from the installed package, never searched for or downloaded.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.zoo.base import LoadOptions, ModelLoader

if TYPE_CHECKING:
    from pytest_graphbudget.case import ModelCase

# name prefix -> (YAML path under ultralytics/cfg/models, suffix after the scale letter)
FAMILIES: dict[str, tuple[str, str]] = {
    "yolov5": ("v5/yolov5.yaml", "u"),
    "yolov8": ("v8/yolov8.yaml", ""),
    "yolo11": ("11/yolo11.yaml", ""),
    "yolo12": ("12/yolo12.yaml", ""),
    "yolo26": ("26/yolo26.yaml", ""),
}
SCALES = "nsmlx"
DEFAULT_IMGSZ = 640

_NAME = re.compile(r"^(yolov5|yolov8|yolo11|yolo12|yolo26)([nsmlx])(u?)(\.pt|\.yaml|\.yml)?$")


def parse(name: str) -> tuple[str, str, str] | None:
    """``(canonical name, family prefix, scale)`` for a YOLO name or a path ending in one."""
    match = _NAME.match(Path(name).name.casefold())
    if match is None:
        return None
    family, scale, u_suffix, _ = match.groups()
    expected = FAMILIES[family][1]
    if u_suffix and not expected:  # "yolov8nu" is not a model
        return None
    return f"{family}{scale}{expected}", family, scale


class UltralyticsLoader(ModelLoader):
    family = "ultralytics"

    def names(self) -> list[str]:
        return [f"{fam}{scale}{tail}" for fam, (_, tail) in FAMILIES.items() for scale in SCALES]

    def can_load(self, name: str) -> bool:
        return not _has_folder(name) and parse(name) is not None

    def load(self, name: str, options: LoadOptions) -> ModelCase:
        from pytest_graphbudget.case import ModelCase
        from pytest_graphbudget.zoo._build import build_module, image

        parsed = None if _has_folder(name) else parse(name)
        if parsed is None:
            raise GraphBudgetError(f"{name} is not an ultralytics YOLO detection model name")
        canonical, family, scale = parsed
        yaml_path = yaml_file(family)
        notes = []
        if name.casefold().endswith(".pt"):
            notes.append(
                f"{name} not found; built from {canonical}.yaml (FLOPs do not depend on weights)"
            )
        if options.seq_len is not None:
            notes.append(f"seq_len ignored: {canonical} takes images")

        tasks = import_ultralytics().nn.tasks

        def factory():
            spec = tasks.yaml_model_load(yaml_path)  # the family's YAML, read from disk
            spec["scale"] = scale
            spec["yaml_file"] = f"{canonical}.yaml"
            return tasks.DetectionModel(cfg=spec, verbose=False)

        model = build_module(factory, options.meta)
        shape = options.image_shape((1, 3, DEFAULT_IMGSZ, DEFAULT_IMGSZ))
        return ModelCase(model, (image(shape),), {}, name=canonical, note="; ".join(notes) or None)


def _has_folder(name: str) -> bool:
    """Whether ``name`` is written as a path (``weights/yolov8n.pt``, ``./yolov8n.pt``,
    ``~/yolov8n.pt``): a file the user points at, which a zoo model must not stand in for."""
    return "/" in name or "\\" in name or name.startswith("~")


def yaml_file(family: str) -> Path:
    """The installed YAML of a family (``FileNotFoundError``-free: a clear error instead)."""
    ultralytics = import_ultralytics()
    relative = FAMILIES[family][0]
    path = Path(ultralytics.__file__).parent / "cfg" / "models" / relative
    if not path.is_file():
        raise GraphBudgetError(
            f"ultralytics {ultralytics.__version__} does not ship {relative}; "
            f"upgrade ultralytics for {family} models"
        )
    return path


def published_params(family: str, scale: str) -> int | None:
    """The parameter count printed in the YAML's comment for ``scale`` (``None`` if absent)."""
    text = yaml_file(family).read_text()
    match = re.search(rf"^\s*{scale}:\s*\[.*?\].*?([\d,]+)\s+parameters", text, re.MULTILINE)
    return int(match.group(1).replace(",", "")) if match else None


def import_ultralytics() -> Any:
    """Import ultralytics with its network features off (unless the user chose otherwise)."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_AUTOINSTALL", "0")
    try:
        import ultralytics
        import ultralytics.nn.tasks
    except ImportError as exc:
        raise GraphBudgetError(
            "YOLO models need ultralytics: pip install 'pytest-graphbudget[yolo]'"
        ) from exc
    return ultralytics
