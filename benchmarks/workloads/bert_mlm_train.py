"""BERT-base masked-language-model pre-training step (Hugging Face transformers, random init).

Builds ``BertForMaskedLM`` from a ``BertConfig`` in code (BERT-base sizes, nothing downloaded) and
trains it on random token ids with the usual 15% masking, AdamW and a linear warm-up schedule,
in fp32.

Anti-patterns it carries:
  * fp32 matmuls at full precision (TF32 off by default)   -> fix: tf32
  * fp32 training where bf16 mixed precision would do       -> fix: bf16-autocast
  * AdamW's step as multi-tensor (foreach) kernels over ~200 tensors rather than one fused kernel
                                                            -> fix: fused-optimizer

    python benchmarks/workloads/bert_mlm_train.py [--batch-size 32] [--seq-len 128] [--iters N] [--small]
"""

import argparse
import time

import torch
from transformers import BertConfig, BertForMaskedLM, get_linear_schedule_with_warmup


def mask_tokens(input_ids, mask_token_id, vocab_size, prob=0.15):
    labels = input_ids.clone()
    masked = torch.rand(input_ids.shape, device=input_ids.device) < prob
    labels[~masked] = -100
    inputs = input_ids.clone()
    replace = masked & (torch.rand(input_ids.shape, device=input_ids.device) < 0.8)
    inputs[replace] = mask_token_id
    rand = masked & ~replace & (torch.rand(input_ids.shape, device=input_ids.device) < 0.5)
    inputs[rand] = torch.randint(vocab_size, input_ids.shape, device=input_ids.device)[rand]
    return inputs, labels


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=128)
        args.batch_size, args.seq_len = 2, 32
    else:
        config = BertConfig()  # bert-base-uncased sizes
    model = BertForMaskedLM(config).to(device)
    model.train()

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), weight_decay=0.01)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=1000,
                                                num_training_steps=max(args.iters, 1001))
    mask_id = 103 % config.vocab_size
    first_word = 1000 if config.vocab_size > 2000 else 0  # past [PAD], [CLS], [SEP], [MASK] and unused ids

    t0 = time.time()
    for it in range(args.iters):
        input_ids = torch.randint(first_word, config.vocab_size, (args.batch_size, args.seq_len), device=device)
        inputs, labels = mask_tokens(input_ids, mask_id, config.vocab_size)
        outputs = model(input_ids=inputs, attention_mask=torch.ones_like(inputs), labels=labels)
        loss = outputs.loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
