"""``toolexec questions``, ``toolexec approve`` and ``toolexec deny``: answer from anywhere.

A call that waits for a human under a journal (docs/durable.md) has its
question in the journal; these commands list the open questions and answer
one, from any process that can open the journal. The waiting executor, in
whatever process, picks the answer up at its next look at the store.

Startup: the parser is built from argparse alone; the journal machinery is
imported when a command runs.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, TextIO

from ._sources import UsageError

if TYPE_CHECKING:
    import argparse

__all__ = ["COMMANDS", "add_parsers", "questions_command"]

COMMANDS = ("questions", "approve", "deny")

_JOURNAL_HELP = "the journal: its SQLite file, or a PostgreSQL database's URL"


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the three commands to the ``toolexec`` parser."""
    listing = commands.add_parser(
        "questions",
        help="list the open questions of a journal (calls waiting for a human)",
        description="List the questions in a journal that nobody has answered yet.",
    )
    listing.add_argument("journal", metavar="JOURNAL", help=_JOURNAL_HELP)
    listing.add_argument("--session", help="only this session's questions")
    for verb, what in (("approve", "approve"), ("deny", "deny")):
        answer = commands.add_parser(
            verb,
            help=f"{what} a waiting call by its question id (see 'toolexec questions')",
            description=(
                f"Answer an open question with '{what}'. The waiting executor, in whatever "
                "process, picks the answer up; the first answer wins."
            ),
        )
        answer.add_argument("journal", metavar="JOURNAL", help=_JOURNAL_HELP)
        answer.add_argument("question", metavar="ID", help="the question's id")
        answer.add_argument("--by", default=os.environ.get("USER", ""), help="who answers")
        answer.add_argument("--reason", default="", help="why (shown to the model on a denial)")


def questions_command(args: argparse.Namespace, stdout: TextIO) -> int:
    """Run one of the three commands; the exit code."""
    import trio

    from .._durable._questions import answer_question, open_store, pending_questions
    from .._durable._sqlite import SQLiteStore

    store = open_store(args.journal)
    if isinstance(store, SQLiteStore) and not os.path.exists(args.journal):
        raise UsageError(f"no journal at {args.journal!r}")  # rather than make an empty one

    async def run() -> int:
        try:
            if args.command == "questions":
                for q in await pending_questions(store, args.session):
                    left = "" if q.deadline is None else f" ({_left(q.deadline)})"
                    stdout.write(f"{q.id}  {q.summary}{left}\n")
                return 0
            approved = args.command == "approve"
            try:
                took = await answer_question(
                    store, args.question, approved, by=args.by, reason=args.reason
                )
            except LookupError as exc:
                raise UsageError(str(exc)) from None
            done = "approved" if approved else "denied"
            stdout.write(f"{done} {args.question}\n" if took else "already answered\n")
            return 0 if took else 1
        finally:
            await store.aclose()

    return trio.run(run)


def _left(deadline: float) -> str:
    seconds = deadline - time.time()
    return "timed out" if seconds <= 0 else f"times out in {seconds:.0f} s"
