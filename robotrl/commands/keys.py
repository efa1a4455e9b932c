"""`robotrl keys`: write a CURVE keypair for an inference server or a client.

Writes `<name>.key` (public: hand it to the peer; a client's goes into the server's
allowed-clients folder) and `<name>.key_secret` (mode 0600: stays on this machine).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from robotrl.core.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="folder for the key files (created if missing)"
    )
    parser.add_argument(
        "--name", required=True, help="who the keys are for, e.g. 'server' or 'robot1' (the file names)"
    )
    parser.add_argument("--force", action="store_true", help="replace existing key files of that name")


def run(args: argparse.Namespace) -> int:
    from robotrl.wire.keys import write_keypair

    try:
        public, secret = write_keypair(args.out, args.name, overwrite=args.force)
    except (FileExistsError, ValueError) as exc:
        raise UserError(str(exc)) from None
    print(
        f"public key: {public}  (give it to the peer: a client's goes into the server's "
        "allowed-clients folder, the server's to every client)"
    )
    print(f"secret key: {secret}  (mode 0600; keep it on this machine)")
    return 0
