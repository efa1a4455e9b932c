"""Robot-side wire layer: msgpack codec, ZMQ transport and CURVE keys.

Bytes only: nothing here knows about policies or robots, and nothing imports torch,
mujoco or lerobot, so a robot computer runs it light (docs/wire-protocol.md).
`codec` turns messages into frames and back, `transport` moves frames over ZMQ
(ROUTER server, DEALER robots) with timeouts, heartbeats and reconnects, `keys` writes
and reads CURVE keypairs.
"""
