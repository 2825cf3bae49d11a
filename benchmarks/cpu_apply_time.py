"""The CPU's share of a parameter_server step, timed: average N gradients, clip, apply AdamW.

What --variable_update=parameter_server asks of the CPU once per step, with the
training graph's own pieces (bert_ad.parallel.towers.average_gradients,
gradients.clip_by_global_norm, the fused AdamW of optimization.py) on every
variable of a BERT model (Google's shapes, bert_ad.model.variable_shapes). The
gradients are variables of their own, so every byte is read from memory as a
tower's gradient would be. Prints seconds per step and the effective memory
bandwidth, in the word count of benchmarks/gpu_scaling_model.py, to pass as its
--cpu_gbps.

    python -m benchmarks.cpu_apply_time [--model base|chinese] [--towers 1,4] [--steps 5]
"""

from __future__ import annotations

import argparse
import sys
import time

from benchmarks.gpu_scaling_model import CLIP_AND_APPLY_WORDS, averaging_words

MODELS = {"base": dict(vocab_size=30522),
          "chinese": dict(vocab_size=61138, hidden_size=384, intermediate_size=1536,
                          num_attention_heads=12)}


def time_step(model: str, towers: int, steps: int) -> tuple:
    """(median seconds of one step, parameters) on this machine's CPU."""
    import numpy as np

    from bert_ad.compat import session_config, tf
    from bert_ad.model.modeling import BertConfig
    from bert_ad.model.variable_shapes import google_variable_shapes
    from bert_ad.parallel.gradients import clip_by_global_norm
    from bert_ad.parallel.optimization import make_optimizer
    from bert_ad.parallel.towers import average_gradients

    shapes = google_variable_shapes(BertConfig(**MODELS[model]))
    with tf.Graph().as_default(), tf.device("/cpu:0"):
        init = tf.random_normal_initializer(stddev=0.02)
        weights = [tf.get_variable(name, shape, initializer=init)
                   for name, shape in shapes.items()]
        grads = [[tf.get_variable(f"tower_{t}/{name}", shape, initializer=init,
                                  trainable=False) for name, shape in shapes.items()]
                 for t in range(towers)]
        averaged = average_gradients([[g.read_value() for g in tower] for tower in grads])
        clipped, _ = clip_by_global_norm(averaged, 1.0)
        optimizer = make_optimizer("adamw", 1e-5)
        step = optimizer.apply_gradients(list(zip(clipped, weights)))
        with tf.Session(config=session_config(1)) as session:
            session.run(tf.global_variables_initializer())
            session.run(step)  # first run: allocations
            times = []
            for _ in range(steps):
                start = time.perf_counter()
                session.run(step)
                times.append(time.perf_counter() - start)
    parameters = int(sum(np.prod(shape) for shape in shapes.values()))
    return float(np.median(times)), parameters


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="base")
    parser.add_argument("--towers", default="1,4", help="gradients averaged per step")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    print("| towers | parameters | seconds per step | effective GB/s |")
    print("|---|---|---|---|")
    for towers in (int(t) for t in args.towers.split(",")):
        seconds, parameters = time_step(args.model, towers, args.steps)
        words = averaging_words(towers) + CLIP_AND_APPLY_WORDS
        print(f"| {towers} | {parameters / 1e6:.1f} M | {seconds:.3f} | "
              f"{words * 4 * parameters / seconds / 1e9:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
