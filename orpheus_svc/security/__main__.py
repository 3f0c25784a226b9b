"""Key helpers (docs/security.md):

    python -m orpheus_svc.security new-key NAME [--max-concurrent N] [--per-minute N] [--admin]
        prints a fresh key on stderr (give it to the caller) and its key-file entry on stdout
    python -m orpheus_svc.security hash          reads a key on stdin, prints its sha256
"""

from __future__ import annotations

import argparse
import sys

from .keys import entry_for, hash_key, new_key


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orpheus_svc.security")
    sub = p.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("new-key", help="make a key and its key-file entry")
    n.add_argument("name")
    n.add_argument("--max-concurrent", type=int, default=0)
    n.add_argument("--per-minute", type=int, default=0)
    n.add_argument("--admin", action="store_true",
                   help="the key may call the admin service (scopes: [admin])")
    sub.add_parser("hash", help="sha256 of a key read from stdin")
    args = p.parse_args(argv)
    if args.cmd == "hash":
        print(hash_key(sys.stdin.readline().strip()))
        return 0
    key = new_key()
    print(f"key (give this to the caller; it is not stored): {key}", file=sys.stderr)
    print("- " + entry_for(args.name, key, args.max_concurrent, args.per_minute,
                           ("admin",) if args.admin else ()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
