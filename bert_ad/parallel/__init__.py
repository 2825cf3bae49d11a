"""N towers on one machine: device plan, training graph, loop, optimizers, checkpoints, scoring."""
