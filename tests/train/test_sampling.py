"""Golden tests of the index maths of the training augmentations (`robotrl.train.sampling`):
VLASH offsets, the conditioning state, forwarded-state noise, delayed latents."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.train.sampling import (
    chunk_indices,
    conditioning_state_rows,
    delayed_frame_index,
    example_indices,
    forward_noise,
    offset_state_index,
    sample_examples,
    tick_motion_std,
)


def test_offset_indices_golden():
    # One episode of frames [10, 20): end = 20, last frame 19. H = 4.
    # t = 12, k = 3: state 15, chunk 15..18, all inside.
    assert offset_state_index(12, 3, 20) == 15
    idx, mask = chunk_indices(15, 4, 20)
    assert idx.tolist() == [15, 16, 17, 18] and mask.tolist() == [True] * 4
    # t = 15, k = 2: state 17, rows 17, 18, 19, 20 -> 20 is past the end: repeat 19, masked.
    idx, mask = chunk_indices(offset_state_index(15, 2, 20), 4, 20)
    assert idx.tolist() == [17, 18, 19, 19] and mask.tolist() == [True, True, True, False]
    # t = 17, k = 5: 22 is past the end; the state clips to the last frame 19, one real row.
    assert offset_state_index(17, 5, 20) == 19
    idx, mask = chunk_indices(19, 4, 20)
    assert idx.tolist() == [19, 19, 19, 19] and mask.tolist() == [True, False, False, False]
    # k = 0 is plain behaviour cloning: the chunk starts at the image frame.
    assert offset_state_index(12, 0, 20) == 12


def test_conditioning_state_is_the_measured_state_at_k_0_and_the_previous_action_after():
    # frames 0..4 of one episode: measured states lag the commanded actions by 0.05
    actions = np.array([[0.1], [0.2], [0.3], [0.4], [0.5]], np.float32)
    states = actions - 0.05
    obs, start = np.array([1, 1, 1, 3]), np.array([1, 2, 4, 3])  # k = 0, 1, 3, 0
    rows = conditioning_state_rows(states, actions, obs, start)
    # k = 0: measured state of frame 1 (0.15); k = 1: a_1 = 0.2; k = 3: a_3 = 0.4; k = 0: 0.35
    np.testing.assert_allclose(rows[:, 0], [0.15, 0.2, 0.4, 0.35], atol=1e-7)
    with pytest.raises(ValueError, match="share a space"):
        conditioning_state_rows(np.zeros((5, 3)), np.zeros((5, 2)), obs, start)
    assert conditioning_state_rows(np.zeros((5, 3)), np.zeros((5, 2)), obs, obs).shape == (4, 3)  # k = 0: fine


def test_training_and_the_executor_condition_on_the_same_state():
    """The stepped executor's request for delay d and the training example with k = d on the
    same (recorded) trajectory condition on the same numbers."""
    from robotrl.inference.chunking import conditioning_state

    actions = np.array([[0.1, 1.0], [0.2, 1.1], [0.3, 1.2], [0.4, 1.3], [0.5, 1.4]])
    states = actions - 0.05  # the arm lags
    for d in range(4):
        t = 1  # the request tick; the last target sent was a_0, the plan for t.. is a_t..
        inference = conditioning_state(states[t], actions[t - 1], actions[t:], d)
        training = conditioning_state_rows(states, actions, np.array([t]), np.array([t + d]))[0]
        np.testing.assert_allclose(inference, training)


def test_forward_noise_grows_with_the_offset_spares_k_0_and_still_joints():
    k = np.repeat([0, 1, 4, 8], 20_000)
    noise = forward_noise(np.random.default_rng(0), k, np.array([0.01, 0.02, 0.0]))
    assert noise.shape == (80_000, 3) and noise.dtype == np.float32
    assert np.all(noise[k == 0] == 0) and np.all(noise[:, 2] == 0)  # no offset; a joint that never moves
    for offset in (1, 4, 8):  # std sigma per tick of offset, per joint
        np.testing.assert_allclose(noise[k == offset][:, :2].std(axis=0), [0.01 * offset, 0.02 * offset], rtol=0.03)


def test_tick_motion_is_measured_within_episodes():
    actions = np.array([[0.0, 1.0], [0.1, 1.0], [0.3, 1.0], [5.0, 1.0], [5.2, 1.0]])  # episode 2 starts at frame 3
    std = tick_motion_std(actions, np.array([0, 0, 0, 3, 3]))
    np.testing.assert_allclose(std, [np.std([0.1, 0.2, 0.2]), 0.0])  # the jump 0.3 -> 5.0 is no motion


def test_delayed_frame_indices_golden():
    # Episode starts at frame 10. t = 16, j = 4 -> frame 12; j = 9 -> 7, clipped to 10.
    assert delayed_frame_index(16, 4, 10) == 12
    assert delayed_frame_index(16, 9, 10) == 10
    assert delayed_frame_index(16, 0, 10) == 16
    # Combined: t = 16, k = 2, j = 4 in [10, 20): image 12, state 18, age 18 - 12 = 6,
    # chunk (H = 3) 18, 19, 19 with the last row masked.
    ex = example_indices(
        np.array([16, 11]), np.array([2, 0]), np.array([4, 3]), 3, np.array([10, 10]), np.array([20, 20])
    )
    assert ex.obs.tolist() == [16, 11] and ex.image.tolist() == [12, 10]  # 11 - 3 = 8 -> clipped to the start 10
    assert ex.state.tolist() == [18, 11]
    assert ex.age.tolist() == [6, 1]  # 18 - 12, 11 - 10
    assert ex.chunk.tolist() == [[18, 19, 19], [11, 12, 13]]
    assert ex.mask.tolist() == [[True, True, False], [True, True, True]]


def test_sampled_examples_stay_inside_their_episode():
    start = np.repeat([0, 7, 30], [7, 23, 5])
    end = np.repeat([7, 30, 35], [7, 23, 5])
    ex = sample_examples(np.random.default_rng(0), 500, 35, 5, 8, 4, start, end)
    ep_start, ep_end = start[ex.state], end[ex.state]
    assert np.all((ex.image >= ep_start) & (ex.image <= ex.state) & (ex.state < ep_end))
    assert np.all((ex.chunk >= ep_start[:, None]) & (ex.chunk < ep_end[:, None]))
    assert np.all((ex.age >= 0) & (ex.age <= 8 + 4))
    assert ex.age.max() >= 8  # offsets and delays really happen
    # k_zero_prob = 0.5: P(k = 0) = 0.5 + 0.5 / 9 = 0.556 (no latent delay, no clipping).
    ex = sample_examples(
        np.random.default_rng(1), 4000, 35, 5, 8, 0, np.zeros(35, int), np.full(35, 10_000), k_zero_prob=0.5
    )
    assert np.mean(ex.state == ex.image) == pytest.approx(0.556, abs=0.03)
