"""What a student learns from its teacher, per row: the distillation loss terms.

Each function gives one value per row (a classifier's text, a token
classifier's window), like the heads' `per_example_loss`, so that the task
takes the weighted mean over the tower's real rows (bert_ad/model/losses.py)
and N towers x B rows train exactly like 1 tower x N*B.

* `soft_target_loss` (Hinton et al. 2015, "Distilling the Knowledge in a
  Neural Network"): the teacher's outputs softened by a temperature T as the
  target. Written as a KL divergence, not a cross-entropy: the gradient is
  the same, but the value is 0 where the student matches the teacher, so the
  logged loss says how far it still is. Multiplied by T^2, Hinton's
  correction that keeps the gradients' scale as T changes (they shrink as
  1/T^2), so --soft_weight means the same at any temperature.
* `token_soft_target_loss`: the same per word, summed over a window's words
  (as the token classifier's own loss is); a CRF student learns the teacher's
  emissions (its per-word logits), where the transitions do not enter.
* `hidden_mse`: a student layer's output against the teacher layer it was
  taken from (TinyBERT's hidden-state loss), mean squared error over the
  real tokens and the hidden units, averaged over the layers matched.
"""

from __future__ import annotations

from typing import Sequence

from bert_ad.compat import tf


def soft_target_loss(student_logits, teacher_logits, objective: str, temperature: float):
    """[rows] the student's distance from the teacher's softened outputs.

    Args:
      student_logits, teacher_logits: [rows, outputs] float32.
      objective: the classifier's ("softmax", "sigmoid", "mse": heads.OBJECTIVES).
      temperature: T > 0; softmax and sigmoid logits are divided by it. A
        regression's value has no temperature: the squared difference.
    """
    teacher_logits = tf.stop_gradient(teacher_logits)
    if objective == "mse":
        return tf.square(student_logits[:, 0] - teacher_logits[:, 0])
    scale = temperature * temperature
    student, teacher = student_logits / temperature, teacher_logits / temperature
    if objective == "sigmoid":
        # Each label a Bernoulli: KL = cross-entropy with the teacher's
        # probability minus the teacher's own entropy; mean over the labels
        # as the sigmoid head's loss.
        target = tf.sigmoid(teacher)
        kl = (tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=student)
              - tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=teacher))
        return scale * tf.reduce_mean(kl, axis=-1)
    return scale * _softmax_kl(teacher, student)


def token_soft_target_loss(student_logits, teacher_logits, word_mask, temperature: float):
    """[rows] per-word softmax KL at temperature T (times T^2), summed over the real words.

    Args:
      student_logits, teacher_logits: [rows, words, tags] float32 (a CRF's emissions).
      word_mask: [rows, words], 1 for a real word.
    """
    teacher_logits = tf.stop_gradient(teacher_logits)
    per_word = _softmax_kl(teacher_logits / temperature, student_logits / temperature)
    mask = tf.cast(word_mask, tf.float32)
    return temperature * temperature * tf.reduce_sum(per_word * mask, axis=1)


def _softmax_kl(teacher_logits, student_logits):
    """KL(softmax(teacher) || softmax(student)) over the last axis."""
    teacher_log_probs = tf.nn.log_softmax(teacher_logits, axis=-1)
    student_log_probs = tf.nn.log_softmax(student_logits, axis=-1)
    return tf.reduce_sum(tf.exp(teacher_log_probs) * (teacher_log_probs - student_log_probs),
                         axis=-1)


def hidden_mse(student_layers: Sequence, teacher_layers: Sequence, input_mask):
    """[rows] mean squared difference of matched layers over each row's real tokens.

    Args:
      student_layers, teacher_layers: equally long lists of [rows, seq, hidden]
        (any float dtype; compared in float32), layer i of one against layer i
        of the other.
      input_mask: [rows, seq], 1 for a real token.
    """
    mask = tf.cast(input_mask, tf.float32)
    tokens = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)            # [rows]
    per_layer = []
    for student, teacher in zip(student_layers, teacher_layers):
        difference = tf.cast(student, tf.float32) - tf.stop_gradient(
            tf.cast(teacher, tf.float32))
        per_token = tf.reduce_mean(tf.square(difference), axis=-1)    # [rows, seq]
        per_layer.append(tf.reduce_sum(per_token * mask, axis=1) / tokens)
    return tf.add_n(per_layer) / float(len(per_layer))
