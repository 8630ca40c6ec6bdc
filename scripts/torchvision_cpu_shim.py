"""CPU test environment only: lets PyPI's torchvision import beside the CPU build of torch.

scripts/setup_env.sh copies this file into a venv whose torch is a ``+cpu`` build, with a ``.pth`` line
that installs the import hook below; it is never part of the sglang_ddtree wheel. PyPI's torchvision
wheels link CUDA torch (libtorch_cuda.so), so beside torch's CPU build their C++ ops do not load.
torchvision tolerates that except for two fake-kernel registrations (``torchvision::nms`` and
``::qnms``), which then fail with "operator torchvision::nms does not exist". Just before
``torchvision._meta_registrations`` runs, and only when torchvision's ops did not load, this defines
those two schemas (the ones torchvision's C++ library defines); calling them still raises, as no kernel
exists. SGLang imports torchvision at module level (``sglang.srt.utils.common``); the CPU suite calls no
torchvision op.
"""

import importlib.abc
import sys

_LIBRARIES = []  # a torch.library.Library drops its definitions when collected
_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
            "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


class _DefineMissingTorchvisionOps(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torchvision._meta_registrations":
            return None
        sys.meta_path.remove(self)  # once is enough
        import torch
        import torchvision.extension

        if not torchvision.extension._has_ops():
            lib = torch.library.Library("torchvision", "FRAGMENT")
            for schema in _SCHEMAS:
                lib.define(schema)
            _LIBRARIES.append(lib)
        return None  # the regular finders import the module


sys.meta_path.insert(0, _DefineMissingTorchvisionOps())
