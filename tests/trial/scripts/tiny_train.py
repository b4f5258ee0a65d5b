"""A tiny CPU training loop, as a user would write it: a DataLoader with no workers, Adam, a seeded model.
Used by the trial tests to run real arms on a machine without a GPU. ``--crash-with FIX`` makes the script
fail when that fix's patch is visible (an arm that crashes); ``--sleep S`` adds host work per batch."""

import argparse
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--iters", type=int, default=100000)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--fail", action="store_true", help="fail at once (a script broken at baseline)")
p.add_argument("--crash-if-workers", action="store_true", help="fail when the DataLoader has workers")
p.add_argument("--infer", action="store_true", help="no optimizer: mark steps with perfstack.step()")
a = p.parse_args()
if a.fail:
    sys.exit("broken on purpose")
torch.manual_seed(0)


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        if a.sleep:
            time.sleep(a.sleep)
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), torch.randint(0, 4, (), generator=g)


loader = torch.utils.data.DataLoader(Data(), batch_size=16, shuffle=False, num_workers=0)
if a.crash_if_workers and loader.num_workers:
    raise RuntimeError("this script cannot run with workers")
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
if a.infer:
    import perfstack
    with torch.no_grad():
        for i, (x, _) in enumerate(loader):
            model(x)
            perfstack.step()
            if i >= a.iters:
                break
    sys.exit(0)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for i, (x, y) in enumerate(loader):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i >= a.iters:
        break
