"""Whether a framework's worker can run here, found without importing the framework.

The worker side asks this before it starts a framework process (an absent framework is
announced with the extra to install, and the worker stays up); the framework side says it
again when an import fails.
"""

from __future__ import annotations

import importlib.util

from shared.errors import ConfigurationError

__all__ = ["FRAMEWORKS", "framework_module", "install_hint", "not_installed"]

# The module each framework's predictor imports: present means installed. Looked up with
# importlib.util.find_spec, never imported, so a worker's own process stays free of frameworks
# (they run in its framework process, services.workers.framework.session).
_MODULES = {
    "onnxruntime": "onnxruntime",
    "pytorch": "torch",
    "tensorflow": "tensorflow",
    "tensorrt": "tensorrt",
    "opencl": "pyopencl",
    # A served model: HTTP (a core dependency) and the model's tokenizer, which counts tokens.
    "endpoint": "tokenizers",
}


# What every worker's framework process imports besides its framework: the built-in datasets
# of scikit-learn and scikit-image. The `worker` extra, part of every framework's.
_WORKER_MODULES = ("sklearn", "skimage")
# What a framework needs beyond its Python package, said with the install hint.
_ALSO_NEEDS = {"tensorrt": " and an NVIDIA GPU with CUDA"}


def framework_module(framework: str) -> str:
    """The Python module that ``framework`` needs; ConfigurationError for an unknown one."""
    try:
        return _MODULES[framework]
    except KeyError:
        raise ConfigurationError(
            f"no predictor for framework {framework!r} in this version of dlscope; "
            f"available: {', '.join(_MODULES)}"
        ) from None


def install_hint(framework: str) -> str:
    """How to install ``framework`` for dlscope: its extra, named as the framework."""
    return f"pip install 'dlscope[{framework}]'{_ALSO_NEEDS.get(framework, '')}"


def not_installed(framework: str) -> str | None:
    """None when ``framework``'s worker can run here, else why, with the extra to install.
    Looked up, never imported: the frameworks run in the workers' framework processes."""
    for module in (framework_module(framework), *_WORKER_MODULES):
        if importlib.util.find_spec(module) is None:
            return (
                f"framework {framework!r} is not installed here (no module {module!r}): "
                f"{install_hint(framework)}"
            )
    return None


# Every framework this version of dlscope has a predictor for.
FRAMEWORKS: tuple[str, ...] = tuple(_MODULES)
