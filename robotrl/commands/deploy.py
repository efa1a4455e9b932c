"""`robotrl deploy`: run a policy on an arm through the asynchronous inference server."""

from __future__ import annotations

import argparse
import signal
import subprocess
from pathlib import Path

from robotrl.errors import UserError
from robotrl.record.teleop import add_device_arguments

MODES = ("sync", "naive", "vlash", "vlash+rtc")
INTERVENERS = ("none", "scripted", "keyboard", "gamepad", "leader")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", default="sim", help="sim (MuJoCo SO-101), so101 or so100 (real arm through lerobot)")
    parser.add_argument("--task", default="reach", help="sim: task name (reach, pick_place); real arm: the instruction")
    parser.add_argument("--policy", type=Path, help="checkpoint to serve locally (needed without --server)")
    parser.add_argument("--server", help="endpoint of a running `robotrl serve`, e.g. tcp://gpu-box:5555; "
                                         "without it a local server process is started on loopback")
    parser.add_argument("--mode", default="vlash", help=f"execution mode: {', '.join(MODES)} (default: vlash)")
    parser.add_argument("--lag-deadband", type=float, metavar="RAD",
                        help="vlash modes: carry the arm joints' tracking error beyond this deadband (rad) into the "
                             "forwarded state, so the policy sees an arm that lags or is blocked (default: off)")
    parser.add_argument("--episodes", type=int, default=3, help="episodes to run (default: 3)")
    parser.add_argument("--seed", type=int, default=0, help="sim: seed of the first episode")
    parser.add_argument("--scenario", default="shifted", help="sim: nominal or shifted physics (default: shifted)")
    parser.add_argument("--max-seconds", type=float, default=20.0, help="longest episode in seconds")
    parser.add_argument("--curve-keys", type=Path,
                        help="folder with this robot's client.key_secret and the server's server.key (CURVE)")
    parser.add_argument("--port", help="real arm: serial port of the follower")
    parser.add_argument("--robot-id", default="follower",
                        help="real arm: lerobot calibration id; also this robot's name for the server and learner")
    online = parser.add_argument_group("online learning (ALGORITHMS.md sections 3-4)")
    online.add_argument("--learn", action="store_true",
                        help="start a learner (`robotrl learn`) and a local server that takes its weights; stream "
                             "every transition to it and fine-tune while the arm runs (needs --policy)")
    online.add_argument("--algo", default="hil-flow", help="with --learn: sac, hil-flow or dsrl (default: hil-flow)")
    online.add_argument("--preset", default="default", help="with --learn: the algorithm's preset (default: default)")
    online.add_argument("--learn-set", action="append", default=[], metavar="FIELD=VALUE",
                        help="with --learn: override one preset field (passed to `robotrl learn --set`); repeatable")
    online.add_argument("--learner-args", default="",
                        help="with --learn: more options for `robotrl learn`, one string, e.g. "
                             "\"--min-transitions 200 --publish-every 10\"")
    online.add_argument("--learn-out", type=Path, default=Path("outputs/learn"),
                        help="with --learn: run folder (buffer/, learner/, actor logs, curves.png)")
    online.add_argument("--resume", action="store_true", help="with --learn: continue the run in --learn-out")
    online.add_argument("--demo-dataset", type=Path, action="append", default=[],
                        help="with --learn: LeRobotDataset mixed into the learner's batches (repeatable)")
    online.add_argument("--actors", type=int, default=1, help="with --learn in sim: simulated arms in parallel")
    online.add_argument("--baseline-csv", type=Path,
                        help="with --learn: actors.csv or --actor-log of a run without learning, drawn next to the curve")
    online.add_argument("--transitions", help="stream transitions to a running learner at this endpoint "
                                              "(e.g. tcp://learner:5560)")
    online.add_argument("--intervene", choices=INTERVENERS, default=None,
                        help="who may take over: scripted (sim: the task's expert, when the policy drifts), or a "
                             "person with keyboard (i toggles), gamepad or leader (--leader-port); their success/"
                             "failure keys end and label the episode (default: scripted with --learn or "
                             "--transitions in sim, else none)")
    online.add_argument("--budget-ticks", type=int, default=150,
                        help="scripted intervener: intervention ticks allowed in the first episode (default: 150)")
    online.add_argument("--takeover-m", type=float, default=0.06,
                        help="scripted intervener: takes over when the policy's end-effector target is this far (m) "
                             "from the expert's, hands back within a third of it (default: 0.06)")
    online.add_argument("--takeover-gripper-rad", type=float, default=0.5,
                        help="scripted intervener: also takes over when the policy's gripper target differs from "
                             "the expert's by more than this (rad; closing in the air); 0: position only "
                             "(default: 0.5)")
    online.add_argument("--taper-episodes", type=int, default=100,
                        help="scripted intervener: episodes over which its budget falls to 0 (default: 100)")
    online.add_argument("--stepped-delay", type=int, metavar="D",
                        help="sim: run on a simulated clock, each chunk taken in exactly D ticks after its "
                             "request (faster than real time, reproducible); default: 30 Hz wall clock")
    online.add_argument("--actor-log", type=Path, help="CSV file: one row per episode (success, interventions, ...)")
    add_device_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from robotrl.inference.chunking import arm_deadband
    from robotrl.inference.deploy import delay_summary, deploy_episode, print_status
    from robotrl.report.table import format_table
    from robotrl.wire.client import ClientSocket

    if args.mode not in MODES:
        raise UserError(f"unknown mode {args.mode!r}; choose from {', '.join(MODES)}")
    if args.lag_deadband is not None and (args.lag_deadband < 0 or not args.mode.startswith("vlash")):
        raise UserError("--lag-deadband needs a vlash mode and a deadband >= 0 rad")
    if args.intervene is None:
        args.intervene = "scripted" if args.robot == "sim" and (args.learn or args.transitions) else "none"
    if args.robot != "sim" and (args.intervene == "scripted" or args.stepped_delay is not None or args.actors != 1):
        raise UserError("--intervene scripted, --stepped-delay and --actors are for simulated arms (--robot sim)")
    if args.learn:
        return _run_learning(args)
    if args.robot != "sim":
        if args.robot not in ("so101", "so100"):
            raise UserError(f"unknown robot {args.robot!r}; choose sim, so101 or so100")
        if not args.port:
            raise UserError(f"--robot {args.robot} needs --port (see `robotrl devices`)")
    server_proc, endpoint = _server(args)
    client = ClientSocket(endpoint, robot_id=f"{args.robot}-{args.robot_id}", curve=_curve(args.curve_keys))
    try:
        info = _connect(client, server_proc)
        if info.get("env_state_dim") and args.robot != "sim":
            raise UserError("this policy reads privileged simulation state (trained with --env-state); "
                            "it cannot drive a real arm")
        session = _session(args, info)
        if args.transitions or args.intervene != "none" or args.stepped_delay is not None or args.actor_log:
            try:
                _run_actor(args, session, client, info)
            finally:
                session.close()
            return 0
        rows, episodes = [], []
        try:
            deadband = arm_deadband(session.spec.num_joints, args.lag_deadband)
            for i in range(args.episodes):
                print(f"episode {i + 1}/{args.episodes}: {args.mode} on {endpoint}")
                ep = deploy_episode(session, client, info, seed=args.seed + i, mode=args.mode,
                                    max_ticks=int(args.max_seconds * session.spec.control_rate_hz),
                                    status=print_status, lag_deadband_rad=deadband)
                print()
                episodes.append(ep)
                rows.append((ep.seed, "yes" if ep.success else "no", ep.ticks, ep.missed_ticks, ep.pauses,
                             ep.step_clamps, ",".join(map(str, ep.versions))))
        finally:
            session.close()
    finally:
        client.close()
        if server_proc is not None:
            server_proc.terminate()
            server_proc.wait(timeout=10)
    print(format_table(("seed", "success", "ticks", "missed ticks", "pauses", "step clamps", "versions"), rows))
    delays = delay_summary(episodes)
    if delays:
        print(f"inference delay (ticks): p50 {delays['p50']:g}  p95 {delays['p95']:g}  max {delays['max']:g}")
    return 0


def _run_actor(args, session, client, info: dict, wall_start_s: float | None = None) -> list:
    """Episodes with transitions streamed to a learner and/or the scripted intervener."""
    from robotrl.buffer.spec import TransitionSpec
    from robotrl.inference.actor import actor_episodes
    from robotrl.inference.chunking import arm_deadband
    from robotrl.inference.transitions import TransitionStreamer
    from robotrl.learn.metrics import CsvLog

    robot_id = f"{args.robot}-{args.robot_id}"
    streamer = intervener = log = None
    if args.transitions:
        size = int(info.get("image_size_px") or 0)
        spec = TransitionSpec(session.spec.num_joints, int(info["action_dim"]),
                              {cam: (size, size) for cam in info.get("cameras", ())}, int(info.get("env_state_dim") or 0))
        streamer = TransitionStreamer(args.transitions, robot_id, spec)
    device = None
    if args.intervene == "scripted":
        from robotrl.sim.intervener import ScriptedIntervener

        intervener = ScriptedIntervener(session, takeover_m=args.takeover_m, handback_m=args.takeover_m / 3,
                                        takeover_gripper_rad=args.takeover_gripper_rad or None,
                                        initial_budget_ticks=args.budget_ticks, taper_episodes=args.taper_episodes)
    elif args.intervene != "none":
        from robotrl.hardware.teleop.intervention import TeleopIntervention
        from robotrl.record.teleop import make_teleop

        device = make_teleop(args.intervene, args, session)
        device.connect()
        intervener = TeleopIntervention(device, session.robot)
    if args.actor_log:
        args.actor_log.unlink(missing_ok=True)
        log = CsvLog(args.actor_log)
    try:
        return actor_episodes(session, client, info, episodes=args.episodes, seed=args.seed, mode=args.mode,
                              robot_id=robot_id, streamer=streamer, intervener=intervener,
                              stepped_delay=args.stepped_delay, log=log, wall_start_s=wall_start_s,
                              max_ticks=int(args.max_seconds * session.spec.control_rate_hz),
                              lag_deadband_rad=arm_deadband(session.spec.num_joints, args.lag_deadband))
    finally:
        if device is not None:
            device.disconnect()
        if streamer is not None:
            streamer.close()
        if log is not None:
            log.close()


def _run_learning(args: argparse.Namespace) -> int:
    """`--learn`: learner + subscribed local server + `--actors` simulated actors."""
    import time

    from robotrl.learn import launch
    from robotrl.learn.metrics import plot_learning_curves, read_csv
    from robotrl.report.table import format_table
    from robotrl.wire.client import ClientSocket

    if args.policy is None or not args.policy.exists():
        raise UserError("--learn needs --policy CKPT: the policy to start from")
    if args.server or args.transitions:
        raise UserError("--learn starts its own learner and server; drop --server/--transitions "
                        "(or run `robotrl learn` and `robotrl serve --weights-from` yourself)")
    if args.actors < 1:
        raise UserError("--actors must be >= 1")
    out = args.learn_out
    signal.signal(signal.SIGTERM, _interrupt)  # run the clean-up below: never orphan the learner or server
    if (out / "learner").exists() and not args.resume:
        raise UserError(f"{out} already holds a run; add --resume to continue it or choose another --learn-out")
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    transitions = f"tcp://{launch.LOCAL}:{launch.free_port()}"
    weights = f"tcp://{launch.LOCAL}:{launch.free_port_pair()}"
    endpoint = f"tcp://{launch.LOCAL}:{launch.free_port()}"
    procs: list[subprocess.Popen] = []
    learner_log = open(out / "learner.log", "a")
    try:
        learner = subprocess.Popen(launch.learner_command(args, out, transitions, weights),
                                   stdout=learner_log, stderr=subprocess.STDOUT)
        procs.append(learner)
        served = out / "learner" / "served"
        (served / "config.json").unlink(missing_ok=True)  # resumed: wait for the learner's fresh one
        launch.wait_for(served / "config.json", learner, "learner", out / "learner.log")
        server = subprocess.Popen(launch.serve_command(served, endpoint, weights),
                                  stdout=subprocess.DEVNULL)
        procs.append(server)
        print(f"learner ({args.algo}) -> {out / 'learner'}; server {endpoint} takes its weights", flush=True)
        for k in range(1, args.actors):
            procs.append(subprocess.Popen(launch.actor_command(args, k, endpoint, transitions, out, args.episodes)))
        args.transitions, args.actor_log, args.robot_id = transitions, out / "actor0.csv", "actor0"
        client = ClientSocket(endpoint, robot_id="sim-actor0")
        try:
            info = _connect(client, server)
            session = _session(args, info)
            try:
                _run_actor(args, session, client, info, wall_start_s=start)
            finally:
                session.close()
        finally:
            client.close()
        for proc in procs[2:]:
            proc.wait()
    finally:
        for proc in reversed(procs):
            launch.stop(proc)
        learner_log.close()
    merged = launch.merge_actor_logs(out, args.actors)
    rows = read_csv(merged)
    print(format_table(("episodes", "success", "intervention rate", "wall min"), launch.curve_table(rows)))
    if rows:
        png = plot_learning_curves(merged, out / "curves.png", baseline_csv=args.baseline_csv)
        print(f"curves: {png}; learner logs: {out / 'learner'} (updates.csv, episodes.csv)")
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _connect(client, server_proc: subprocess.Popen | None) -> dict:
    """Wait for the server's hello; a local server gets 2 minutes to load its policy,
    and its death ends the wait at once."""
    from robotrl.wire.errors import TransportTimeout

    if server_proc is None:
        return client.connect(timeout_s=10.0)
    for _ in range(120):
        if server_proc.poll() is not None:
            raise UserError(f"the local inference server exited (code {server_proc.returncode}); "
                            "run `robotrl serve --policy ...` on its own to see why")
        try:
            return client.connect(timeout_s=1.0)
        except TransportTimeout:
            continue
    raise UserError("the local inference server did not answer within 2 minutes")


def _server(args: argparse.Namespace) -> tuple[subprocess.Popen | None, str]:
    """The endpoint to use, starting a local `robotrl serve` when none is given."""
    if args.server:
        return None, args.server
    if args.policy is None:
        raise UserError("give --policy CKPT (a local server is started) or --server ENDPOINT")
    if not args.policy.exists():
        raise UserError(f"policy checkpoint {args.policy} does not exist")
    from robotrl.learn.launch import free_port, serve_command

    endpoint = f"tcp://127.0.0.1:{free_port()}"
    proc = subprocess.Popen(serve_command(args.policy, endpoint), stdout=subprocess.DEVNULL)
    return proc, endpoint


def _session(args: argparse.Namespace, info: dict):
    from robotrl.clock import SimClock, WallClock

    if args.robot == "sim":
        from robotrl.hardware.robot import CameraSpec
        from robotrl.sim.env import TaskEnv

        size = int(info.get("image_size_px") or 0)
        cameras = tuple(CameraSpec(name, size, size) for name in info.get("cameras", ()))
        clock = WallClock() if getattr(args, "stepped_delay", None) is None else SimClock()
        return TaskEnv(args.task, args.scenario, cameras=cameras, clock=clock)
    from robotrl.hardware.lerobot_arm.robot import LerobotArm
    from robotrl.hardware.safety import SafeRobot
    from robotrl.record.session import RobotSession

    clock = WallClock()
    robot = SafeRobot(LerobotArm(args.robot, port=args.port, robot_id=args.robot_id), clock=clock)
    robot.connect(watchdog_thread=True)
    return RobotSession(robot, args.task, clock)


def _curve(folder: Path | None):
    if folder is None:
        return None
    from robotrl.wire.keys import ClientKeys

    return ClientKeys(secret_file=folder / "client.key_secret", server_public_file=folder / "server.key")
