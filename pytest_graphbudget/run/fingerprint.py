"""A fingerprint of the code and data a model's forward pass can reach, for the profile cache.

A cached profile is only as good as its key, and the figures depend on every line of Python that
runs while the graph is traced, not only on the module classes. ``fingerprint(model)`` walks
from the model to everything its code can reach:

- every project class of a module (and its bases): each function, property and constant of its
  body;
- every function: its bytecode and constants, defaults, closure cells, attributes, and every
  global it names (a helper in this or another file, a constant, a config dict, a class),
  recursively; a project module named by the code, or imported in its body, contributes the
  attributes the code names;
- every module instance: its attributes (hyper-parameters, config objects), its hooks, each
  parameter's and buffer's name, shape, dtype and device, and the values of small integer or
  bool buffers (indices and masks can steer the graph) and of tiny non-parameter tensors;
  torch's global module hooks; numpy constants by their bytes; TorchScript by its code.

Library code (the standard library, installed packages, this package; ``codewalk.py`` says which
files are, and which names and imports a code object uses) is named, not walked: the
environment part of the key (``cache.environment``) holds every installed distribution's
version. Library classes and modules are still searched for functions replaced by project code
(a monkeypatched ``F.gelu`` or ``nn.Linear.forward``).

Not covered: values read at run time from files or environment variables, names looked up
from strings (``getattr(helpers, name)``, ``globals()[name]``), and the values of input tensors.

When something reachable has no sound description (an object with neither attributes nor a
value-like ``repr``, such as a lock or a compiled function), ``Unfingerprintable`` says what, and
the caller does not cache the profile.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import sys
import types
from pathlib import Path
from typing import Any

from pytest_graphbudget.run import codewalk
from pytest_graphbudget.run.codewalk import is_library_file

MAX_STEPS = 500_000
"""Objects described per fingerprint before giving up (a model that reaches a huge data set)."""

MAX_VALUE_ELEMENTS = 4096
"""Integer or bool tensors up to this many elements are described by their values too."""

MAX_SCALARS = 16
"""Other tensors that are not parameters (a temperature, a scale) up to this many elements are
described by their values too; random weights never are, so an unseeded model still hits."""

_CLASS_SKIP = frozenset(
    {
        "__dict__",
        "__weakref__",
        "__doc__",
        "__module__",
        "__qualname__",
        "__annotations__",
        "__slotnames__",
        "__parameters__",
        "__orig_bases__",
        "__abstractmethods__",
        "_abc_impl",
        "__dataclass_fields__",
        "__dataclass_params__",
        "__match_args__",
        "__firstlineno__",
        "__static_attributes__",
    }
)
_MODULE_SKIP = frozenset({"training", "_parameters", "_buffers", "_modules"})


class Unfingerprintable(Exception):
    """Something the model can reach has no sound description; the message says what."""


def fingerprint(model: Any) -> str:
    """A digest of everything ``model``'s forward can reach; raises ``Unfingerprintable``."""
    return digest(_Walker().model(model))


def describe(value: Any) -> Any:
    """A JSON-able description of ``value`` (inputs, options): tensors by shape, dtype and
    device only; raises ``Unfingerprintable``."""
    return _Walker(tensor_values=False).run(value)


def digest(parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


# -- the walk -----------------------------------------------------------------------------------


class _Walker:
    """One description of a graph of objects; shared objects and cycles become references."""

    def __init__(self, tensor_values: bool = True):
        self.tensor_values = tensor_values
        self.refs: dict[int, int] = {}
        self.keep: list[Any] = []  # keeps every described object alive, so ids stay unique
        self.steps = 0
        self.open_modules: set[int] = set()

    def run(self, value: Any) -> Any:
        try:
            return self.value(value)
        except Unfingerprintable:
            raise
        except RecursionError:
            raise Unfingerprintable("the objects it reaches nest too deeply") from None
        except Exception as exc:  # a surprising object: not cached, never a crash
            raise Unfingerprintable(f"{type(exc).__name__}: {exc}") from None

    def model(self, model: Any) -> Any:
        hooks, patches = None, None
        torch = sys.modules.get("torch")
        if torch is not None:
            module = torch.nn.modules.module
            hooks = [
                list(getattr(module, name, {}).values())
                for name in ("_global_forward_pre_hooks", "_global_forward_hooks")
            ]
            patches = patched_torch(torch)
        return self.run(["model", model, hooks, patches])

    def value(self, obj: Any, names: frozenset[str] = frozenset()) -> Any:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise Unfingerprintable(f"it reaches more than {MAX_STEPS} objects")
        if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
            return [type(obj).__name__, repr(obj)]
        if isinstance(obj, types.ModuleType):
            return self._module(obj, names)
        if type(obj) in (tuple, frozenset):  # immutable: described where they occur, so that a
            return self._describe(obj)  # set's iteration order never numbers the references
        key = id(obj)
        if key in self.refs:
            return ["ref", self.refs[key]]
        self.refs[key] = len(self.refs)
        self.keep.append(obj)
        return self._describe(obj)

    def _describe(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")
        if torch is not None:
            found = self._torch(obj, torch)
            if found is not None:
                return found
        if isinstance(obj, dict):
            return [type(obj).__name__, [[self.value(k), self.value(v)] for k, v in obj.items()]]
        if isinstance(obj, (list, tuple)):
            kind = type(obj)
            head = type(obj).__name__ if kind in (list, tuple) else self.value(kind)
            return ["seq", head, [self.value(v) for v in obj]]
        if isinstance(obj, (set, frozenset)):
            items = [self.value(v) for v in obj]
            return [type(obj).__name__, sorted(items, key=lambda v: json.dumps(v, default=str))]
        if isinstance(obj, enum.Enum):
            return ["enum", self.value(type(obj)), obj.name]
        if isinstance(obj, types.FunctionType):
            return self._function(obj)
        if isinstance(obj, types.MethodType):
            return ["method", self.value(obj.__func__), self.value(obj.__self__)]
        if isinstance(obj, functools.partial):
            return ["partial", self.value(obj.func), self.value(obj.args), self.value(obj.keywords)]
        if isinstance(obj, (staticmethod, classmethod)):
            return [type(obj).__name__, self.value(obj.__func__)]
        if isinstance(obj, property):
            return ["property", self.value(obj.fget), self.value(obj.fset), self.value(obj.fdel)]
        if isinstance(obj, functools.cached_property):
            return ["cached_property", self.value(obj.func)]
        if isinstance(obj, type):
            return self._class(obj)
        if isinstance(obj, types.CodeType):
            return self._code(obj)
        if isinstance(obj, (types.BuiltinFunctionType, types.WrapperDescriptorType)) or type(
            obj
        ).__name__ in ("method_descriptor", "method-wrapper", "getset_descriptor"):
            return self._builtin(obj)
        if isinstance(obj, types.CellType):
            try:
                return ["cell", self.value(obj.cell_contents)]
            except ValueError:
                return ["cell"]
        import logging

        if isinstance(obj, (logging.Logger, logging.LoggerAdapter)):
            return ["logger", getattr(obj, "name", None)]
        if type(obj).__module__ == "numpy" and hasattr(obj, "tobytes"):  # a constant table
            digest = hashlib.sha256(obj.tobytes()).hexdigest()
            return ["numpy", type(obj).__name__, list(obj.shape), str(obj.dtype), digest]
        return self._instance(obj)

    def _torch(self, obj: Any, torch: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return self._tensor(obj, torch)
        if isinstance(obj, torch.jit.ScriptFunction):
            return ["script", self._script(obj)]
        if isinstance(obj, torch.jit.ScriptModule):
            state = [*obj.named_parameters(), *obj.named_buffers()]
            return [
                "script module",
                [[name, self._script(m)] for name, m in obj.named_modules()],
                [[name, self.value(t)] for name, t in state],
            ]
        if isinstance(obj, torch.nn.Module):
            return self._nn_module(obj)
        if isinstance(obj, (torch.dtype, torch.device, torch.Size, torch.layout)):
            return ["torch", type(obj).__name__, str(obj)]
        if isinstance(obj, torch.memory_format):
            return ["torch", "memory_format", str(obj)]
        if isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            return ["op", str(obj)]
        return None

    def _script(self, obj: Any) -> Any:
        """TorchScript: its compiled source, which its Python attributes do not show."""
        try:
            return [getattr(obj, "qualified_name", None), obj.code]
        except Exception as exc:  # a script module with no forward of its own
            raise Unfingerprintable(f"TorchScript without readable code: {exc}") from None

    def _tensor(self, tensor: Any, torch: Any) -> Any:
        parts = [
            "tensor",
            type(tensor).__name__,
            list(tensor.shape),
            str(tensor.dtype),
            tensor.device.type,
        ]
        exact = not tensor.is_floating_point() and not tensor.is_complex()
        small = tensor.numel() <= MAX_SCALARS and not isinstance(tensor, torch.nn.Parameter)
        if self.tensor_values and (small or (exact and tensor.numel() <= MAX_VALUE_ELEMENTS)):
            from pytest_graphbudget.compat import is_fake

            if not tensor.is_meta and not is_fake(tensor):
                data = tensor.detach().cpu().contiguous().view(-1)
                parts.append(hashlib.sha256(repr(data.tolist()).encode()).hexdigest())
        return parts

    def _nn_module(self, module: Any) -> Any:
        state = vars(module)
        parts: list[Any] = ["nn.Module", self.value(type(module))]
        for name, value in state.items():
            if name in _MODULE_SKIP:
                continue
            if "hooks" in name and isinstance(value, dict):  # keyed by process-wide handle ids
                parts.append([name, [self.value(v) for v in value.values()]])
            else:
                parts.append([name, self.value(value)])
        for name, tensor in state.get("_parameters", {}).items():
            parts.append(["parameter", name, None if tensor is None else self.value(tensor)])
        for name, tensor in state.get("_buffers", {}).items():
            parts.append(["buffer", name, None if tensor is None else self.value(tensor)])
        for name, child in state.get("_modules", {}).items():
            parts.append(["child", name, self.value(child)])
        return parts

    def _module(self, module: types.ModuleType, names: frozenset[str]) -> Any:
        """A Python module, through the attributes the referring code names (``helpers.scale``
        names ``scale``). A library module is named; only its submodules and any of its
        functions replaced by project code (a monkeypatched ``F.gelu``) are walked."""
        if id(module) in self.open_modules:  # a cycle of imports (os.path.os...)
            return ["module", module.__name__, "open"]
        self.open_modules.add(id(module))
        try:
            return self._module_parts(module, names)
        finally:
            self.open_modules.discard(id(module))

    def _module_parts(self, module: types.ModuleType, names: frozenset[str]) -> Any:
        namespace = vars(module)
        used = sorted(name for name in names if name in namespace)
        if codewalk.is_library_module(module):
            replaced = [
                [name, self.value(namespace[name], names)]
                for name in used
                if isinstance(namespace[name], types.ModuleType)
                or (
                    isinstance(namespace[name], types.FunctionType)
                    and not is_library_file(namespace[name].__code__.co_filename)
                )
            ]
            return ["library module", module.__name__, replaced]
        if used:
            return [
                "module",
                module.__name__,
                [[name, self.value(namespace[name], names)] for name in used],
            ]
        filename = getattr(module, "__file__", None)
        if not filename:
            raise Unfingerprintable(f"module {module.__name__} has no source file")
        return ["module", module.__name__, hashlib.sha256(Path(filename).read_bytes()).hexdigest()]

    def _class(self, cls: type) -> Any:
        name = f"{cls.__module__}.{cls.__qualname__}"
        if codewalk.is_library_class(cls):
            patched = [
                [attr, self.value(value)]
                for attr, value in vars(cls).items()
                if isinstance(value, types.FunctionType)
                and not is_library_file(value.__code__.co_filename)
            ]
            return ["library class", name, patched]
        parts: list[Any] = ["class", name, [self.value(base) for base in cls.__bases__]]
        if type(cls) is not type:
            parts.append(["metaclass", self.value(type(cls))])
        for attr, value in vars(cls).items():
            if attr not in _CLASS_SKIP:
                parts.append([attr, self.value(value)])
        return parts

    def _function(self, fn: types.FunctionType) -> Any:
        code = fn.__code__
        qualname = f"{fn.__module__}.{fn.__qualname__}"
        if is_library_file(code.co_filename):
            # A library wrapper (``@torch.no_grad()``, ``functools.singledispatch``,
            # ``contextlib.contextmanager``) holds the project's function: in ``__wrapped__``
            # or a cell. Keyed by name alone, an edit of that function was never seen.
            cells = [c.cell_contents for c in fn.__closure__ or () if _filled(c)]
            held = [f for f in (vars(fn).get("__wrapped__"), *cells) if _project_function(f)]
            return ["library function", qualname, *(self.value(f) for f in held)]
        used = frozenset(codewalk.names(code))
        namespace = fn.__globals__
        return [
            "function",
            qualname,
            self._code(code),
            self.value(fn.__defaults__),
            self.value(fn.__kwdefaults__),
            [self.value(cell) for cell in fn.__closure__ or ()],
            self.value(dict(vars(fn))) if vars(fn) else None,
            [[name, self.value(namespace[name], used)] for name in sorted(used & namespace.keys())],
            [[name, self.value(module, used)] for name, module in self._imported(fn)],
        ]

    def _imported(self, fn: types.FunctionType) -> list[tuple[str, Any]]:
        try:
            return codewalk.imported(fn)
        except codewalk.ImportFailed as exc:
            raise Unfingerprintable(str(exc)) from None

    def _code(self, code: types.CodeType) -> Any:
        return [
            "code",
            code.co_name,
            hashlib.sha256(code.co_code).hexdigest(),
            hashlib.sha256(getattr(code, "co_exceptiontable", b"")).hexdigest(),
            [
                self._code(c) if isinstance(c, types.CodeType) else self.value(c)
                for c in code.co_consts
            ],
            list(code.co_names),
            list(code.co_varnames),
            list(code.co_freevars),
            list(code.co_cellvars),
            [code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags],
        ]

    def _builtin(self, obj: Any) -> Any:
        owner = getattr(obj, "__self__", None)
        name = f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', None)}"
        bound = None
        if owner is not None and not isinstance(owner, types.ModuleType):
            bound = self.value(owner)
        return ["builtin", name, bound]

    def _instance(self, obj: Any) -> Any:
        cls = type(obj)
        parts: list[Any] = ["instance", self.value(cls)]
        state = getattr(obj, "__dict__", None)
        slots = [
            slot
            for klass in cls.__mro__
            for slot in _as_tuple(vars(klass).get("__slots__", ()))
            if slot not in ("__dict__", "__weakref__")
        ]
        if isinstance(state, dict):
            parts.append([[self.value(k), self.value(v)] for k, v in state.items()])
        elif dataclasses.is_dataclass(obj):
            parts.append(
                [[f.name, self.value(getattr(obj, f.name))] for f in dataclasses.fields(obj)]
            )
        for slot in slots:
            parts.append([slot, self.value(getattr(obj, slot, None))])
        if isinstance(state, dict) or slots or dataclasses.is_dataclass(obj):
            return parts
        text = repr(obj)
        if " at 0x" in text or " object at " in text:
            raise Unfingerprintable(
                f"a {cls.__module__}.{cls.__qualname__} object has no stable form"
            )
        return parts + [text]


def _as_tuple(slots: Any) -> tuple[str, ...]:
    return (slots,) if isinstance(slots, str) else tuple(slots)


def _filled(cell: Any) -> bool:
    """Whether a closure cell holds a value (one not yet assigned raises on reading)."""
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _project_function(value: Any) -> bool:
    """A plain function defined in the project's own files, not a library's."""
    return isinstance(value, types.FunctionType) and not is_library_file(value.__code__.co_filename)


def patched_torch(torch: Any) -> list[Any]:
    """What replaced torch's own functions and Tensor methods that library code calls too
    (``F.linear``, reached through ``nn.Linear``; ``torch.Tensor.relu``): a function of the
    project's, a ``functools.partial``, or, in ``F`` and ``Tensor``, another function under
    the name (``F.gelu = F.softsign``), each said, so that a patch no code of the project
    names still keys the cache. Read per model: a test may patch between models. Libraries
    that swap torch's top-level functions for their own (ultralytics' ``torch.save``) are
    left out: an import of them would change every key."""
    import functools

    found = []
    for where, namespace in (
        ("F", vars(torch.nn.functional)),
        ("torch", vars(torch)),
        ("Tensor", vars(torch.Tensor)),
    ):
        for name, value in namespace.items():
            if _project_function(value) or isinstance(value, functools.partial):
                found.append([where, name, value])  # described in full by the walk
            elif where != "torch" and callable(value):  # not torch.save: ultralytics' own
                called = getattr(value, "__name__", name)
                if called not in (name, f"_{name}"):
                    found.append([where, name, str(called)])
    return sorted(found, key=lambda entry: entry[:2])
