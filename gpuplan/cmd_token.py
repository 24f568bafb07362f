"""``gpuplan token create|list|revoke``: the API's bearer tokens (printed once, stored hashed)."""

from __future__ import annotations

import argparse
import sys

from gpuplan.options import add_db, open_db, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="make a token and print it once")
    create.add_argument("--team", required=True, help="the team its jobs belong to")
    create.add_argument(
        "--scopes", required=True, metavar="SCOPES", help="comma-separated: read, submit, admin"
    )
    create.add_argument(
        "--max-priority", type=float, metavar="P", help="the highest priority it may submit (default: any)"
    )
    add_db(create)
    listing = sub.add_parser("list", help="every token: id, team, scopes, cap, created, revoked")
    listing.add_argument("--json", action="store_true", help="print the tokens as JSON")
    add_db(listing)
    revoke = sub.add_parser("revoke", help="revoke a token by id (its sessions end too)")
    revoke.add_argument("id", metavar="ID", help="the token's id (from `gpuplan token list`)")
    add_db(revoke)


def run(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from gpuplan.app.core.tokens import create_token, parse_scopes, token_summary
    from gpuplan.table import format_table

    now = datetime.now(UTC)
    if args.token_command == "create":
        scopes = parse_scopes(args.scopes)  # before the database: bad input touches nothing
        store = open_db(args)
        try:
            made = create_token(store, args.team, scopes, args.max_priority, now)
        finally:
            store.close()
        sys.stderr.write(f"token {made.token.id} for team {made.token.team}; shown once, store it now:\n")
        sys.stdout.write(made.secret + "\n")
        return 0
    store = open_db(args)
    try:
        if args.token_command == "revoke":
            token = store.revoke_token(args.id, now)
            sys.stdout.write(f"revoked {token.id} (team {token.team})\n")
            return 0
        rows = [token_summary(token) for token in store.tokens()]
    finally:
        store.close()
    if args.json:
        print_json(rows)
        return 0
    headers = ["id", "team", "scopes", "max_priority", "created_at", "revoked_at"]
    table = [
        [
            str(r["id"]),
            str(r["team"]),
            ",".join(str(scope) for scope in r["scopes"]),  # type: ignore[attr-defined]
            r["max_priority"] or "-",
            r["created_at"],
            r["revoked_at"] or "-",
        ]
        for r in rows
    ]
    sys.stdout.write(format_table(headers, table) + "\n")
    return 0
