"""What the benchmarks' Hugging Face workers share: the optimizer and one update.

Imported inside the PyTorch worker processes only (it imports torch), by
bench_memory, squad_run and precision_study.
"""

from __future__ import annotations

# Weights AdamW's decay leaves alone, as Google's BERT and transformers' examples do.
NO_DECAY = ("bias", "LayerNorm.weight")


def adamw(model, learning_rate: float, weight_decay: float):
    """torch's AdamW (eps 1e-6, Google's) decaying every weight but NO_DECAY's."""
    import torch
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if not any(k in n for k in NO_DECAY)],
               "weight_decay": weight_decay},
              {"params": [p for n, p in named if any(k in n for k in NO_DECAY)],
               "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, eps=1e-6)


def apply_update(model, optimizer, loss, clip_norm: float, scheduler=None) -> None:
    """One training update from `loss`: backward, gradients clipped by their global
    norm, the optimizer's (and the schedule's) step, gradients cleared."""
    import torch
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
