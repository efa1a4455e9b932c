"""The twin: the MuJoCo SO-101 behind simulated Feetech STS3215 motor buses on
pseudo-terminals (a follower and a leader arm) and cameras lerobot's `ZMQCamera` opens,
so the real-arm commands (`robotrl record --robot so101`, `robotrl deploy --robot so101`)
run unchanged against it through lerobot's own drivers.

- `bus`: the servo bus emulator and lerobot's calibration file format.
- `calibration`: the twin's calibration and its raw encoder ticks <-> URDF radians maps.
- `cameras`: publishers of rendered frames in lerobot's ZMQ image-server format.
- `twin`: the real-time loop tying physics to the buses and cameras (`robotrl twin`).
"""
