"""`llmfleet keys add|list|remove`: API keys whose SHA-256 digests go to a key file
(``cluster/keys.py``); a new key is printed once and never stored."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from cluster.config import load_config

if TYPE_CHECKING:
    from cluster.keys import KeyLimits


def _keys_file(args: argparse.Namespace) -> str:
    if args.file:
        return str(args.file)
    configured = load_config(args.config).server.api_keys_file if args.config else None
    if configured:
        return configured
    from cluster.local_state import STATE_DIR

    return str(STATE_DIR / "keys.yaml")


def _limits_text(limits: KeyLimits) -> str:
    def show(v: int | None) -> str:
        return "-" if v is None else str(v)

    return f"{show(limits.requests_per_min):>6} {show(limits.tokens_per_min):>8} {show(limits.max_streams):>7}"


def cmd_keys(args: argparse.Namespace) -> int:
    from cluster import keys

    try:
        path = _keys_file(args)
        if args.keys_command == "add":
            limits = keys.KeyLimits(args.rpm, args.tpm, args.max_streams)
            key = keys.add_key(
                path, args.name, admin=args.admin, limits=limits, replace=args.replace
            )
            print(key, flush=True)
            print(
                f"llmfleet: key {args.name!r} (key_id {keys.digest(key)[:12]}) is shown once "
                f"and not stored; only its SHA-256 went to {path}",
                file=sys.stderr,
            )
        elif args.keys_command == "remove":
            if not keys.remove_key(path, args.name):
                print(f"llmfleet: no key {args.name!r} in {path}", file=sys.stderr)
                return 2
            print(f"llmfleet: removed {args.name!r} from {path}", file=sys.stderr)
        else:
            rows = keys.list_keys(path)  # read first: an unreadable file prints no header
            print(
                f"{'name':<20} {'admin':>5} {'rpm':>6} {'tpm':>8} {'streams':>7} {'key_id':<12} created"
            )
            for k in rows:
                print(
                    f"{k.name:<20} {k.admin!s:>5} {_limits_text(k.limits)} {k.key_id:<12} {k.created}"
                )
    except (ValueError, OSError) as err:  # KeyFileError and ConfigError are ValueErrors
        print(f"llmfleet: {err}", file=sys.stderr)
        return 2
    return 0


def add_parser(sub: Any) -> None:
    where = argparse.ArgumentParser(add_help=False)
    group = where.add_mutually_exclusive_group()
    group.add_argument("--file", default=None, help="key file (default: ~/.llmfleet/keys.yaml)")
    group.add_argument("--config", default=None, help="take the file from server.api_keys_file")
    p = sub.add_parser("keys", help="API keys for the OpenAI API (only hashes are stored)")
    ksub = p.add_subparsers(dest="keys_command", required=True)
    add = ksub.add_parser("add", parents=[where], help="create a key; prints it once")
    add.add_argument("name")
    add.add_argument("--admin", action="store_true", help="may use the admin endpoints")
    add.add_argument("--rpm", type=int, default=None, help="requests per minute (default: no cap)")
    add.add_argument("--tpm", type=int, default=None, help="tokens per minute (default: no cap)")
    add.add_argument("--max-streams", type=int, default=None, help="concurrent requests")
    add.add_argument("--replace", action="store_true", help="rotate an existing name's key")
    ksub.add_parser("list", parents=[where], help="names, limits and key ids (never keys)")
    rm = ksub.add_parser("remove", parents=[where], help="delete a key")
    rm.add_argument("name")
    p.set_defaults(func=cmd_keys)
