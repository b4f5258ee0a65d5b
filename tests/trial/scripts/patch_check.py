"""Install fixes of trial/_patches.py into a fresh torch and call a small conv model once, with its loss outside
it: prints whether Module.__call__ is torch's own again, the model's class name, whether it is still the
class it was, the output dtype, and what each fix changed.

    python patch_check.py PATH/TO/_patches.py FIX,FIX
"""

import importlib.util
import sys

import torch

spec = importlib.util.spec_from_file_location("patches", sys.argv[1])
patches = importlib.util.module_from_spec(spec)
spec.loader.exec_module(patches)
orig = torch.nn.Module.__call__
patches.install(torch, sys.argv[2].split(","))
m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))
loss = torch.nn.MSELoss()(m(torch.randn(2, 3, 8, 8)), torch.zeros(2, 2))
loss.backward()
print(torch.nn.Module.__call__ is orig, type(m).__name__, isinstance(m, torch.nn.Sequential),
      m(torch.randn(1, 3, 8, 8)).dtype, {k: v["count"] for k, v in patches.applied.items()})
