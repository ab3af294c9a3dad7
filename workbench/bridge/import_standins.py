"""Stand-ins for ``triton`` and ``torchvision`` where they are not installed (the
CPU-only bridge venv, ``make bridge-test``).

SGLang 0.5.23 imports both at module level on the way to its cache, for code the
bridge never runs:
 * triton, all over (``sglang.srt.utils.common`` first): to decorate GPU kernels
   (``@triton.jit``, ``@triton.autotune(...)``), annotate their parameters
   (``tl.constexpr``) and name its classes (``triton.Config``, ``JITFunction``). Real
   triton is a ~250 MB wheel (~700 MB installed) of GPU compiler.
 * torchvision, once (``sglang.srt.multimodal.internvl_utils``: ``import
   torchvision.transforms``) for image preprocessing. PyPI's torchvision wheels are
   CUDA builds: on the CPU torch their C extension does not load, and torchvision
   0.28 then fails at import (it registers a fake kernel for an op it never defined).
The bridge runs the cache, its allocators and pools on the CPU in torch, so this
module answers every ``triton`` / ``torchvision`` import (and their submodules) with
a permissive placeholder: decorators hand back the function unchanged, capitalised
names are classes (so ``isinstance`` works) whose attributes are placeholders, anything else is a placeholder
that accepts any call, attribute or index. Code that did run on a placeholder would
fail loudly, never compute something wrong in silence. (transformers finds the
torchvision stand-in too and names a few of its members at import; nothing calls them.)

Installed only by ``sglang_env``, for each package no real install of which can be
found, after torch is imported (so torch's own start-up sees neither).
"""


from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

PACKAGES = {"triton": "3.6.0", "torchvision": "0.28.0"}  # name -> the version it claims


class Placeholder:
    """Any name under a stood-in package: a decorator that returns what it decorates, or a factory
    of more placeholders."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # @triton.jit, @triton.heuristics(...)(fn), ...
        return Placeholder(f"{self._name}(...)")

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self._name}.{attr}")

    def __getitem__(self, item):
        return self

    def __repr__(self) -> str:
        return f"<triton stand-in {self._name}>"


class _PermissiveClass(type):
    """Stood-in classes answer any class attribute (``InterpolationMode.NEAREST``)."""

    def __getattr__(cls, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{cls.__name__}.{attr}")


class StandInModule(types.ModuleType):
    """A stood-in package or one of its submodules: every missing name made on first use."""

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr[:1].isupper():  # a class (Config, JITFunction, ...): isinstance() needs a type
            value = _PermissiveClass(attr, (), {"__init__": lambda self, *args, **kwargs: None})
        else:
            value = Placeholder(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, packages: tuple[str, ...]) -> None:
        self.packages = packages

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.packages:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        if module.__name__ in PACKAGES:
            module.__version__ = PACKAGES[module.__name__]


def install_if_missing() -> tuple[str, ...]:
    """Stand in for each of PACKAGES that has no real install; returns those it stands in for."""
    for finder in sys.meta_path:
        if isinstance(finder, StandInFinder):
            return finder.packages
    missing = tuple(name for name in PACKAGES if importlib.util.find_spec(name) is None)
    if missing:
        sys.meta_path.insert(0, StandInFinder(missing))
    return missing
