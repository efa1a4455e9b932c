"""Real SO-100/SO-101 follower arms through lerobot.

`robot.LerobotArm` implements the `Robot` protocol; `units` converts lerobot's degrees and
gripper 0..100 to URDF radians without importing lerobot. Importing this package opens
nothing and registers nothing.
"""
