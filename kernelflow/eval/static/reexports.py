"""Module re-exports: the canonical names a dotted chain also stands for (see `static_rules._classified`).

Allowed modules hold other modules under plain attribute names: `torch.nn.init.torch` *is* `torch`,
`torch.cuda.torch`, `torch.nn.functional.torch` and `torch.torch` too; `tl.core.ir` is
`triton._C.libtriton.ir`; `triton.language.math.core` is `triton.language.core`. A rule keyed on a
prefix (`torch.relu` computes; `torch.nn.init.*` may be called) misjudges a chain that goes through
such an attribute: `torch.nn.init.torch.relu(x)` passed every static check (red team a05). So every
chain is judged under its written name *and* under each canonical form `canonical_forms` gives: for
every segment after the first that names a re-exported module (the table below), the chain restarted
at that module. `torch.nn.Parameter` and `torch.nn.Buffer` are tensor subclasses, so a chain through
them is also judged as `torch.Tensor...`.

The table was read on torch 2.13 / triton 3.7 by walking sys.modules after `import torch,
triton.language` (TRITON_INTERPRET=1): every public `vars(module)` entry of an allowed root that is a
module of an allowed root under another name. Names that are also genuine submodules (`triton.language.math`,
`collections.abc`, `torch.nn`) are harmless here: the restarted form is judged *in addition*, and the
allowed modules' members are judged by the same rules either way. Linear: one form per segment.
"""

from __future__ import annotations

# attribute name -> the module it is bound to wherever an allowed module re-exports it
REEXPORT_ALIASES: dict[str, str] = {
    **{root: root for root in ("torch", "triton", "math", "typing", "typing_extensions", "functools", "itertools",
                               "dataclasses", "enum", "numbers", "collections", "abc")},
    "F": "torch.nn.functional", "nn": "torch.nn", "init": "torch.nn.init", "tl": "triton.language",
    "core": "triton.language.core", "runtime": "triton.runtime", "knobs": "triton.knobs",
    "ir": "triton._C.libtriton.ir", "passes": "triton._C.libtriton.passes", "llvm": "triton._C.libtriton.llvm",
    "nvidia": "triton._C.libtriton.nvidia", "amd": "triton._C.libtriton.amd",
    "ops": "torch.ops", "aten": "torch.ops.aten", "prim": "torch.ops.prim", "library": "torch.library",
    "fx": "torch.fx", "classes": "torch.classes", "hooks": "torch.utils.hooks", "grad": "torch.nn.grad",
    "dist": "torch.distributed", "fwAD": "torch.autograd.forward_ad", "prof": "torch.autograd.profiler",
    "container_abcs": "collections.abc",
}
# Tensor subclasses in the allowed names: their members are torch.Tensor's (torch.nn.Parameter.relu computes).
TENSOR_SUBCLASSES = {"torch.nn.Parameter": "torch.Tensor", "torch.nn.Buffer": "torch.Tensor",
                     "torch.nn.parameter.Parameter": "torch.Tensor", "torch.nn.parameter.Buffer": "torch.Tensor"}


def canonical_forms(qual: str) -> list[str]:
    """The other names `qual` stands for through re-exported modules (`torch.nn.init.torch.relu` -> `torch.relu`)."""
    parts = qual.split(".")
    forms: list[str] = []
    for i in range(1, len(parts)):
        target = REEXPORT_ALIASES.get(parts[i])
        if target is not None:
            forms.append(".".join([target, *parts[i + 1:]]))
    for i in range(2, min(len(parts) - 1, 4) + 1):  # members of torch.nn.Parameter (the class itself is allowed)
        target = TENSOR_SUBCLASSES.get(".".join(parts[:i]))
        if target is not None:
            forms.append(".".join([target, *parts[i:]]))
    for form in list(forms):  # a restarted form may itself pass through a tensor subclass
        for name, target in TENSOR_SUBCLASSES.items():
            if form.startswith(name + "."):
                forms.append(target + form[len(name):])
    return [f for f in dict.fromkeys(forms) if f != qual]
