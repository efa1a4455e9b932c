"""Online learning: weight flow, learner, algorithms, checkpoints."""
