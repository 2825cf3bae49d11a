"""A linear-chain CRF in plain tf.compat.v1 graph ops (TF 1.15 and TF 2.x alike).

TF 2.x has no tf.contrib.crf, so this is the same model written in ops both
lanes have: a score per (position, tag) from the network (`emissions`), a
learned score per (previous tag, tag) pair (`transitions`, the variable
`crf/transitions` of shape [num_tags, num_tags], as tf.contrib.crf names it),
no separate start/end scores. The score of a tag path y of length n is

  sum_t emissions[t, y_t] + sum_{t>=1} transitions[y_{t-1}, y_t]

and its probability is exp(score) / Z, Z summed over all paths of length n.

Rows of a batch have their own lengths (`lengths`, [batch] int32): positions
at or after a row's length are ignored, whatever they hold. A row of length 0
(filler rows of a batch) has score 0, log Z 0, log-likelihood 0 and a zero
gradient. All arithmetic is float32 (emissions in float16 are cast).
"""

from __future__ import annotations

from bert_ad.compat import tf

TRANSITIONS_NAME = "crf/transitions"


def crf_transitions(num_tags: int, initializer=None) -> "tf.Variable":
    """The transition-score variable `crf/transitions`, [num_tags, num_tags].

    Created in (or reused from, under a reusing scope) the current variable
    scope; entry [i, j] scores tag i followed by tag j.
    """
    if initializer is None:
        initializer = tf.truncated_normal_initializer(stddev=0.02)
    with tf.variable_scope("crf"):
        return tf.get_variable("transitions", [num_tags, num_tags], tf.float32,
                               initializer)


def _read(transitions):
    """The transitions' value, read here, outside the loops.

    A while loop that captures the variable (or a plain read of it, which TF 2
    captures as the variable's handle) has a gradient that cannot be placed
    when the loop runs on another device than the variable (tower 1 on
    /gpu:1, variables on the CPU). An Identity of the value is a tensor.
    """
    return tf.identity(tf.convert_to_tensor(transitions))


def _prepare(emissions, lengths):
    emissions = tf.cast(emissions, tf.float32)
    lengths = tf.cast(lengths, tf.int32)
    max_length = tf.shape(emissions)[1]
    mask = tf.sequence_mask(lengths, max_length, dtype=tf.float32)  # [B, L]
    return emissions, lengths, mask


def _time_major(emissions, mask):
    """[L + 1, B, T] emissions and [L + 1, B] mask, time first.

    The extra step is masked out; it is there so that the loops over steps
    1..L never run over nothing (max_length 1), which TF 1.15's TensorArray
    cannot stack.
    """
    emissions = tf.pad(emissions, [[0, 0], [0, 1], [0, 0]])
    mask = tf.pad(mask, [[0, 0], [0, 1]])
    return tf.transpose(emissions, [1, 0, 2]), tf.transpose(mask, [1, 0])


def crf_sequence_score(emissions, tag_ids, lengths, transitions) -> "tf.Tensor":
    """Score of the given tag paths.

    Args:
      emissions: [batch, max_length, num_tags] float.
      tag_ids: [batch, max_length] int, valid tag ids everywhere (padding 0).
      lengths: [batch] int.
      transitions: [num_tags, num_tags] float32.

    Returns:
      [batch] float32.
    """
    emissions, lengths, mask = _prepare(emissions, lengths)
    num_tags = tf.shape(transitions)[0]
    tag_ids = tf.cast(tag_ids, tf.int32)
    unary = tf.reduce_sum(tf.one_hot(tag_ids, num_tags, dtype=tf.float32) * emissions, -1)
    unary = tf.reduce_sum(unary * mask, 1)
    # transitions[y_{t-1}, y_t] through the flattened matrix.
    pair_index = tag_ids[:, :-1] * num_tags + tag_ids[:, 1:]
    binary = tf.gather(tf.reshape(transitions, [-1]), pair_index)  # [B, L-1]
    binary = tf.reduce_sum(binary * mask[:, 1:], 1)
    return unary + binary


def crf_log_norm(emissions, lengths, transitions) -> "tf.Tensor":
    """log Z per row: the forward algorithm in log space.

    Args:
      emissions: [batch, max_length, num_tags] float.
      lengths: [batch] int.
      transitions: [num_tags, num_tags] float32.

    Returns:
      [batch] float32 (0 for rows of length 0).
    """
    emissions, lengths, mask = _prepare(emissions, lengths)
    transitions = _read(transitions)
    time_major, time_mask = _time_major(emissions, mask)

    def step(alpha, inputs):
        emission, keep = inputs
        # alpha'[j] = logsumexp_i(alpha[i] + transitions[i, j]) + emission[j].
        # keepdims=True: the gradient of a rank-dropping reduction pins one op
        # by name (colocate_with), and in TF 2's while loops that name is the
        # same in every tower, which then cannot be placed on two devices.
        scores = tf.reduce_logsumexp(alpha[:, :, None] + transitions[None], 1, keepdims=True)
        updated = scores[:, 0, :] + emission
        return tf.where(keep > 0, updated, alpha)

    final = tf.foldl(step, (time_major[1:], time_mask[1:]), initializer=time_major[0])
    return tf.reduce_logsumexp(final, 1) * tf.cast(lengths > 0, tf.float32)


def crf_log_likelihood(emissions, tag_ids, lengths, transitions) -> "tf.Tensor":
    """log p(tag_ids | emissions) per row: [batch] float32 (0 for length 0).

    The training loss is its negative, averaged over the real rows. Shapes as
    in `crf_sequence_score`.
    """
    return (crf_sequence_score(emissions, tag_ids, lengths, transitions)
            - crf_log_norm(emissions, lengths, transitions))


def crf_decode(emissions, lengths, transitions):
    """The best tag path of each row (Viterbi).

    Args:
      emissions: [batch, max_length, num_tags] float.
      lengths: [batch] int.
      transitions: [num_tags, num_tags] float32.

    Returns:
      (tag_ids [batch, max_length] int32, 0 after each row's length;
       best_score [batch] float32, the path's score, 0 for length 0).
    """
    emissions, lengths, mask = _prepare(emissions, lengths)
    transitions = _read(transitions)
    num_tags = tf.shape(transitions)[0]
    max_length = tf.shape(emissions)[1]
    time_major, time_mask = _time_major(emissions, mask)
    first = time_major[0]
    identity = tf.zeros_like(first, tf.int32) + tf.range(num_tags)[None]  # [B, T]

    def forward(state, inputs):
        score, _ = state
        emission, keep = inputs
        candidates = score[:, :, None] + transitions[None]  # [B, previous, current]
        best_previous = tf.argmax(candidates, 1, output_type=tf.int32)
        updated = tf.reduce_max(candidates, 1) + emission
        # Past a row's end the score stays and the back pointer is the
        # identity, so backtracking walks unchanged to the row's last tag.
        return (tf.where(keep > 0, updated, score),
                tf.where(keep > 0, best_previous, identity))

    scores, back_pointers = tf.scan(forward, (time_major[1:], time_mask[1:]),
                                    initializer=(first, identity))
    final = scores[-1]                                    # [B, T]
    last_tag = tf.argmax(final, 1, output_type=tf.int32)  # [B]

    def backward(tag, back_pointer):
        return tf.reduce_sum(back_pointer * tf.one_hot(tag, num_tags, dtype=tf.int32), 1)

    earlier = tf.scan(backward, tf.reverse(back_pointers, [0]), initializer=last_tag)
    path = tf.concat([tf.reverse(earlier, [0]), last_tag[None]], 0)  # [L + 1, B]
    tag_ids = tf.transpose(path[:max_length], [1, 0]) * tf.cast(mask, tf.int32)
    best_score = tf.reduce_max(final, 1) * tf.cast(lengths > 0, tf.float32)
    return tag_ids, best_score
