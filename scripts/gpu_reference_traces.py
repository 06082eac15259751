#!/usr/bin/env python3
"""Records reference traces with PyTorch's own torch.profiler on a GPU machine: what dlprof-report
must read from the PyTorch and GPU of that machine. A small transformer trains in BF16 autocast
with AdamW, under torch.profiler with every option on (record_shapes, profile_memory, with_stack,
with_flops, with_modules), twice:
  transformer   a plain loop;
  leak          the same loop keeping each step's logits (64 MiB), as a list of a step's outputs
                kept for later does: memory that grows step after step.
Each trace goes to OUT/<name>/ as torch.profiler's tensorboard_trace_handler writes it (gzip).

Usage: gpu_reference_traces.py OUT
"""
import os
import sys

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, vocab=8192, width=512, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, nhead=8, dim_feedforward=4 * width, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, num_layers=layers)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        return self.head(self.blocks(self.embed(tokens)))


def record(out, name, keep_logits):
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = Model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 8192, (16, 256), device=device)
    targets = torch.randint(0, 8192, (16, 256), device=device)
    kept = []
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=4, repeat=1)
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            schedule=schedule, record_shapes=True, profile_memory=True, with_stack=True, with_flops=True,
            with_modules=True,
            on_trace_ready=torch.profiler.tensorboard_trace_handler(os.path.join(out, name), use_gzip=True)) as prof:
        for _ in range(6):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(tokens)
                loss = nn.functional.cross_entropy(logits.float().view(-1, 8192), targets.view(-1))
            loss.backward()
            optimizer.step()
            if keep_logits:
                kept.append(logits)
            loss.item()
            prof.step()
    print(f"{name}: peak {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB allocated, "
          f"{len(kept)} steps' logits kept")
    torch.cuda.reset_peak_memory_stats()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if not torch.cuda.is_available():
        print("gpu_reference_traces: skipped: no CUDA device")
        return 0
    out = sys.argv[1]
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    record(out, "transformer", keep_logits=False)
    record(out, "leak", keep_logits=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
