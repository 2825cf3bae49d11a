"""The CRF against brute-force enumeration of every tag path, in both lanes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bert_ad.compat import tf
from bert_ad.model.crf import (TRANSITIONS_NAME, crf_decode, crf_log_likelihood,
                               crf_log_norm, crf_sequence_score, crf_transitions)


def brute_force(emissions, transitions, length):
    """(log Z, best path, best score, marginals [length, T]) by enumeration."""
    num_tags = transitions.shape[0]
    paths = list(itertools.product(range(num_tags), repeat=length))
    scores = np.array([path_score(emissions, transitions, p) for p in paths])
    log_z = np.log(np.sum(np.exp(scores - scores.max()))) + scores.max()
    best = int(np.argmax(scores))
    probabilities = np.exp(scores - log_z)
    marginals = np.zeros((length, num_tags))
    for path, probability in zip(paths, probabilities):
        marginals[np.arange(length), list(path)] += probability
    return log_z, list(paths[best]), scores[best], marginals


def path_score(emissions, transitions, path):
    score = sum(emissions[t, tag] for t, tag in enumerate(path))
    score += sum(transitions[a, b] for a, b in zip(path[:-1], path[1:]))
    return score


def random_batch(rng, num_tags, lengths, max_length):
    emissions = rng.normal(0, 2, (len(lengths), max_length, num_tags)).astype(np.float32)
    transitions = rng.normal(0, 1, (num_tags, num_tags)).astype(np.float32)
    tags = rng.randint(0, num_tags, (len(lengths), max_length)).astype(np.int32)
    for row, length in enumerate(lengths):
        tags[row, length:] = 0
    return emissions, transitions, tags


@pytest.mark.parametrize("num_tags, lengths, max_length", [
    (3, [1, 2, 3, 4, 5], 5),
    (4, [5, 3, 1, 4], 6),   # padded past the longest row
    (4, [2, 0, 5], 5),      # a filler row of length 0
    (3, [1], 1),
])
def test_against_enumeration_of_all_paths(num_tags, lengths, max_length):
    rng = np.random.RandomState(num_tags * 100 + max_length)
    emissions, transitions, tags = random_batch(rng, num_tags, lengths, max_length)
    with tf.Graph().as_default():
        emissions_in = tf.placeholder(tf.float32, [None, None, num_tags])
        transitions_in = tf.constant(transitions)
        tags_in = tf.constant(tags)
        lengths_in = tf.constant(lengths, tf.int32)
        score = crf_sequence_score(emissions_in, tags_in, lengths_in, transitions_in)
        log_norm = crf_log_norm(emissions_in, lengths_in, transitions_in)
        likelihood = crf_log_likelihood(emissions_in, tags_in, lengths_in, transitions_in)
        decoded, best_score = crf_decode(emissions_in, lengths_in, transitions_in)
        # d log Z / d emissions = the tag marginals.
        marginals = tf.gradients(tf.reduce_sum(log_norm), emissions_in)[0]
        with tf.Session() as session:
            results = session.run([score, log_norm, likelihood, decoded, best_score,
                                   marginals], {emissions_in: emissions})
    score, log_norm, likelihood, decoded, best_score, marginals = results
    assert decoded.shape == (len(lengths), max_length) and decoded.dtype == np.int32
    for row, length in enumerate(lengths):
        if length == 0:
            assert score[row] == log_norm[row] == likelihood[row] == best_score[row] == 0
            assert not decoded[row].any() and not marginals[row].any()
            continue
        log_z, best_path, best, expected_marginals = brute_force(
            emissions[row, :length], transitions, length)
        expected_score = path_score(emissions[row], transitions, list(tags[row, :length]))
        np.testing.assert_allclose(score[row], expected_score, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(log_norm[row], log_z, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(likelihood[row], expected_score - log_z, rtol=1e-5,
                                   atol=1e-5)
        assert list(decoded[row, :length]) == best_path
        assert not decoded[row, length:].any()
        np.testing.assert_allclose(best_score[row], best, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(marginals[row, :length], expected_marginals, atol=1e-5)
        assert not marginals[row, length:].any()


def test_transitions_variable_and_finite_gradients_with_float16_emissions():
    rng = np.random.RandomState(0)
    lengths = [4, 0, 1, 3]
    emissions, _, tags = random_batch(rng, 5, lengths, 4)
    emissions[1] = 1e4  # whatever a filler row holds must not leak into the loss
    with tf.Graph().as_default():
        transitions = crf_transitions(5)
        assert transitions.name == TRANSITIONS_NAME + ":0"
        assert transitions.shape.as_list() == [5, 5]
        emissions_in = tf.constant(emissions.astype(np.float16))
        likelihood = crf_log_likelihood(emissions_in, tags, lengths, transitions)
        loss = -tf.reduce_sum(likelihood) / 3.0
        gradients = tf.gradients(loss, [emissions_in, transitions])
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            loss_value, (emission_gradient, transition_gradient) = session.run(
                [loss, gradients])
    assert np.isfinite(loss_value) and loss_value > 0
    assert np.isfinite(emission_gradient.astype(np.float32)).all()
    assert np.isfinite(transition_gradient).all() and np.abs(transition_gradient).sum() > 0
    assert not emission_gradient[1].any()


def test_transitions_are_shared_under_a_reusing_scope():
    with tf.Graph().as_default():
        with tf.variable_scope("tower", reuse=tf.AUTO_REUSE):
            first = crf_transitions(3)
            second = crf_transitions(3)
        assert first is second or first.name == second.name
        assert len(tf.global_variables()) == 1
