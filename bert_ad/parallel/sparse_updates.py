"""When a row-sparse ("lazy") embedding update is possible: --sparse_embedding_updates.

Checked from the flags before TensorFlow is imported (bert_ad/cli/flag_checks.py),
again with a cluster's size (bert_ad/cli/builders.py), and by the training
graph itself for callers that build it directly; one rule for all three.
"""

from __future__ import annotations

from bert_ad.errors import fail


def check_sparse_updates(name: str) -> None:
    """Refuse row-sparse updates for an optimizer without a row-wise step.

    Raises:
      UserError: name is "lamb" (its trust ratio is a norm over the whole
        variable).
    """
    if (name or "").strip().lower() == "lamb":
        fail("--sparse_embedding_updates does not work with --optimizer=lamb: LAMB "
             "scales each variable's step by the norm of the whole variable; use "
             "adamw, adam or radam, or leave --sparse_embedding_updates out")


def check_sparse_embedding_updates(optimizer: str, gradient_accumulation_steps: int,
                                   num_workers: int) -> None:
    """Refuse --sparse_embedding_updates where the update could not be row-sparse.

    Accumulation and the cross-worker exchange turn the embedding gradient
    into a dense tensor: the rows the batch used would be unknown and the
    update silently dense. LAMB has no row-wise step.

    Raises:
      UserError: one line naming the flags.
    """
    check_sparse_updates(optimizer)
    if gradient_accumulation_steps > 1:
        fail(f"--sparse_embedding_updates does not work with --gradient_accumulation_steps="
             f"{gradient_accumulation_steps} (the accumulated gradient is dense); leave "
             "one of them out")
    if num_workers > 1:
        fail("--sparse_embedding_updates does not work with several workers (the "
             "exchanged gradient is dense); leave it out")
