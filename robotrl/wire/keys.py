"""CURVE keypairs as files, in the format of `zmq.auth.create_certificates`.

`write_keypair(folder, name)` writes two text files (ZPL certificates, z85 keys):
`<name>.key` holds the public key only: give it to the other side (a client's goes into
the server's allowed-clients folder, the server's to every client). `<name>.key_secret`
holds public + secret key, is created with mode 0600 and never leaves its machine.
`zmq.auth.load_certificate` and `ThreadAuthenticator.configure_curve` read both.
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
import zmq.auth.thread

from robotrl.core.errors import WireError

log = logging.getLogger(__name__)

_BANNER = (
    "#   ****  Generated on {when} by robotrl keys  ****\n"
    "#   ZeroMQ CURVE {kind} Certificate\n"
    "#   {advice}\n\n"
    "metadata\ncurve\n"
)


@dataclass(frozen=True)
class ServerKeys:
    """CURVE setup of an inference server."""

    secret_file: Path
    """The server's `<name>.key_secret`."""
    allowed_clients_dir: Path
    """Folder of the public `<client>.key` files allowed to talk to the server (read at
    server start; restart the server after adding a key)."""


@dataclass(frozen=True)
class ClientKeys:
    """CURVE setup of a client (robot computer, actor)."""

    secret_file: Path
    """This client's `<name>.key_secret`."""
    server_public_file: Path
    """The server's public `<name>.key`."""


def curve_server(ctx: zmq.Context, keys: ServerKeys, *socks: zmq.Socket) -> zmq.auth.thread.ThreadAuthenticator:
    """Make `socks` (of context `ctx`, not bound yet) CURVE servers that only talk to the
    clients whose public keys are in `keys.allowed_clients_dir`; the authenticator
    returned must be stopped when the context closes (one per context)."""
    public, secret = load_keypair(keys.secret_file)
    if not keys.allowed_clients_dir.is_dir():
        raise FileNotFoundError(
            f"allowed-clients folder {keys.allowed_clients_dir} not found: "
            "create it and copy the clients' public .key files into it"
        )
    auth = zmq.auth.thread.ThreadAuthenticator(ctx, log=log)
    auth.start()
    auth.configure_curve(domain="*", location=str(keys.allowed_clients_dir))
    for sock in socks:
        sock.curve_server = True
        sock.curve_publickey, sock.curve_secretkey = public, secret
    return auth


def curve_client(sock: zmq.Socket, keys: ClientKeys) -> None:
    """Make `sock` (not connected yet) a CURVE client of the server whose public key is
    `keys.server_public_file`."""
    public, secret = load_keypair(keys.secret_file)
    sock.curve_publickey, sock.curve_secretkey = public, secret
    sock.curve_serverkey = load_public_key(keys.server_public_file)


def server_keys(folder: Path) -> ServerKeys:
    """The server side of a keys folder: `server.key_secret` and `allowed_clients/`."""
    return ServerKeys(secret_file=folder / "server.key_secret", allowed_clients_dir=folder / "allowed_clients")


def client_keys(folder: Path) -> ClientKeys:
    """The client side of a keys folder: `client.key_secret` and the server's `server.key`."""
    return ClientKeys(secret_file=folder / "client.key_secret", server_public_file=folder / "server.key")


def write_keypair(folder: Path, name: str, overwrite: bool = False) -> tuple[Path, Path]:
    """Write a new keypair as `folder/<name>.key` and `folder/<name>.key_secret`.

    Returns (public file, secret file). Raises `FileExistsError` if either exists and
    `overwrite` is False (a replaced secret key locks its owner out).
    """
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"key name {name!r}: use a plain file name such as 'robot1' or 'server'")
    folder.mkdir(parents=True, exist_ok=True)
    public_file, secret_file = folder / f"{name}.key", folder / f"{name}.key_secret"
    if not overwrite:
        for path in (public_file, secret_file):
            if path.exists():
                raise FileExistsError(f"{path} exists: choose another --name, or pass --force to replace it")
    public, secret = zmq.curve_keypair()
    when = datetime.datetime.now().isoformat(timespec="seconds")
    _write(
        public_file,
        _BANNER.format(when=when, kind="Public", advice="Give this file to the peer.")
        + f'    public-key = "{public.decode()}"\n',
        mode=0o644,
    )
    _write(
        secret_file,
        _BANNER.format(when=when, kind="**Secret**", advice="DO NOT PROVIDE THIS FILE TO OTHER USERS.")
        + f'    public-key = "{public.decode()}"\n    secret-key = "{secret.decode()}"\n',
        mode=0o600,
    )
    return public_file, secret_file


def load_keypair(secret_file: Path) -> tuple[bytes, bytes]:
    """(public, secret) z85 keys from a `<name>.key_secret` file."""
    public, secret = _load(secret_file)
    if not secret:
        raise WireError(f"{secret_file} holds no secret key: pass the `.key_secret` file, not the `.key`")
    return public, secret


def load_public_key(key_file: Path) -> bytes:
    """The z85 public key in a `<name>.key` (or `.key_secret`) file."""
    return _load(key_file)[0]


def _load(path: Path) -> tuple[bytes, bytes | None]:
    if not Path(path).is_file():
        raise FileNotFoundError(
            f"CURVE key file {path} not found: create one with `robotrl keys --out DIR --name NAME`"
        )
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (ValueError, OSError) as exc:
        raise WireError(f"{path} is not a CURVE key file ({exc}): recreate it with `robotrl keys`") from exc
    if len(public) != 40 or (secret is not None and len(secret) != 40):
        raise WireError(f"{path} holds a malformed key (z85 keys are 40 characters): recreate it with `robotrl keys`")
    return public, secret


def _write(path: Path, text: str, mode: int) -> None:
    """Write `text` to `path`, created with `mode` from the start (no readable window)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
