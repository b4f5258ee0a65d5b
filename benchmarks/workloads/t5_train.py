"""T5 (t5-small sizes) sequence-to-sequence training from a config (transformers, random init).

``T5ForConditionalGeneration`` from a ``T5Config`` built in code: 6+6 layers, d_model 512, d_ff
2048, 32128 vocabulary. Random source (512 tokens) and target (128 tokens) ids, AdamW, fp32.

Anti-patterns it carries:
  * fp32 matmuls at full precision (TF32 off by default)    -> fix: tf32
  * fp32 training where bf16 mixed precision would do        -> fix: bf16-autocast
  * AdamW step as foreach kernels rather than a fused one     -> fix: fused-optimizer

    python benchmarks/workloads/t5_train.py [--batch-size 32] [--src-len 512] [--tgt-len 128] [--iters N] [--small]
"""

import argparse
import time

import torch
from transformers import T5Config, T5ForConditionalGeneration


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--src-len", type=int, default=512)
    p.add_argument("--tgt-len", type=int, default=128)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        config = T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                          decoder_start_token_id=0, pad_token_id=0)
        args.batch_size, args.src_len, args.tgt_len = 2, 32, 16
    else:
        config = T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                          decoder_start_token_id=0, pad_token_id=0)
    model = T5ForConditionalGeneration(config).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    t0 = time.time()
    for it in range(args.iters):
        src = torch.randint(2, config.vocab_size, (args.batch_size, args.src_len), device=device)
        tgt = torch.randint(2, config.vocab_size, (args.batch_size, args.tgt_len), device=device)
        loss = model(input_ids=src, attention_mask=torch.ones_like(src), labels=tgt).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
