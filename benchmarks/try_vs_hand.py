"""Check `perfstack try` against a timing done by hand: the same change (channels_last on the ResNet-18
workload: the model and each step's batch converted), written into the code by hand, timed in alternating
fresh processes with the minimum kept.

    python benchmarks/try_vs_hand.py [--rounds 3] [--out DIR]

Prints both gains; `perfstack try`'s should fall inside its own 95% interval around the hand figure's.
The hand timing is independent of perfstack: plain CUDA events around `--steps` steps after `--warmup`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "benchmarks" / "workloads" / "resnet18_train.py"

HAND = r"""
import sys, torch, torchvision
cl = sys.argv[1] == "1"; warmup, steps = int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
model = torchvision.models.resnet18(num_classes=1000).cuda()
if cl:
    model = model.to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
crit = torch.nn.CrossEntropyLoss()
batches = [(torch.randn(128, 3, 224, 224, device="cuda"), torch.randint(0, 1000, (128,), device="cuda")) for _ in range(4)]
marks = []
for it in range(warmup + steps):
    x, y = batches[it % 4]
    if cl:  # converted where the step takes its batch, as try's fix converts the model's 4-D inputs
        x = x.contiguous(memory_format=torch.channels_last)
    loss = crit(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    if it >= warmup - 1:
        e = torch.cuda.Event(enable_timing=True); e.record(); marks.append(e)
torch.cuda.synchronize()
ms = sorted(marks[i].elapsed_time(marks[i + 1]) for i in range(len(marks) - 1))
print(ms[len(ms) // 2])
"""


def hand(cl: bool, warmup: int, steps: int) -> float:
    out = subprocess.run([sys.executable, "-c", HAND, "1" if cl else "0", str(warmup), str(steps)],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", default=".")
    a = p.parse_args()
    base, cl = [], []
    for _ in range(a.rounds):  # alternating: A B, A B, ...
        base.append(hand(False, a.warmup, a.steps))
        cl.append(hand(True, a.warmup, a.steps))
    hand_gain = 100 * (1 - min(cl) / min(base))
    run = Path(a.out) / "try-resnet18-channels-last.json"
    subprocess.run([sys.executable, "-m", "perfstack", "-q", "try", "--fix", "channels-last", "--rounds", str(a.rounds),
                    "--warmup", str(a.warmup), "--steps", str(a.steps), "--no-combine", "-o", str(run), "--",
                    sys.executable, str(WORKLOAD)], check=True, stdout=subprocess.DEVNULL)
    arm = next(x for x in json.loads(run.read_text())["try"]["arms"] if x["id"] == "channels-last")
    lo, hi = arm["ci_pct"]
    print(f"by hand: {min(base):.2f} -> {min(cl):.2f} ms per step, gain {hand_gain:.1f}% "
          f"(rounds {', '.join(f'{b:.2f}/{c:.2f}' for b, c in zip(base, cl))})")
    print(f"perfstack try: gain {arm['gain_pct']:.1f}% [95% CI {lo:+.1f} .. {hi:+.1f}], best {arm['best_ms']:.2f} ms")
    print("agree: the hand gain is inside try's interval" if lo <= hand_gain <= hi else
          f"differ by {arm['gain_pct'] - hand_gain:+.1f} points (outside try's interval)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
