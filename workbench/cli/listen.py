"""``urc listen``: subscribe to a live SGLang server's KV event stream (its
``--kv-events-config`` endpoint) and keep the consumer's view of its cache: one line per
batch, the named violations, and at the end what the view holds per medium."""

from __future__ import annotations

import contextlib
import sys
import time

from ..model.scenarios.errors import elide
from ..model.scenarios.scenario import ScenarioError
from .common import EXIT_CHECK_FAILED, EXIT_OK, STORE_SUFFIX

POLL_MS = 200


def add_parser(command) -> None:
    listen = command("listen", "watch a running server's cache through its KV events (ZMQ)",
                     "Subscribe to an SGLang server's KV event stream (--kv-events-config '{\"publisher\": \"zmq\", "
                     "\"endpoint\": \"tcp://*:5557\"}') and keep a router's view of its cache: the blocks per medium, "
                     "what each batch added and removed, and the checks a consumer can make (a removal of an unknown "
                     "block, a store under an unknown parent, a gap in sequence numbers). Exit 1 when one failed.")
    listen.add_argument("endpoint", metavar="ENDPOINT", help="the server's PUB endpoint: tcp://HOST:PORT or ipc://PATH")
    listen.add_argument("--replay", metavar="ENDPOINT",
                        help="the server's replay endpoint (its replay_endpoint): fetch the batches published before "
                             "this subscription, and any the stream skips")
    listen.add_argument("--topic", default="", help="the server's topic (default: \"\", SGLang's default)")
    listen.add_argument("--record", metavar="OUT.jsonl",
                        help="write every event received, one JSON line each with its batch's seq and ts")
    listen.add_argument("--store", metavar="RUN.urcdb",
                        help="keep every batch in a file as it arrives (memory stays flat); open it again with "
                             "urc tui --listen RUN.urcdb")
    listen.add_argument("--force", action="store_true", help="let --record or --store overwrite an existing file")
    listen.add_argument("--batches", type=int, metavar="N", help="stop after N batches")
    listen.add_argument("--idle", type=float, metavar="SECONDS",
                        help="stop once nothing arrived for SECONDS (default: listen until Ctrl-C)")
    listen.add_argument("--quiet", action="store_true", help="print no line per batch, only violations and the end")


def run(args) -> int:
    if args.batches is not None and args.batches <= 0:
        raise ScenarioError("--batches must be a positive int")
    if args.idle is not None and args.idle <= 0:
        raise ScenarioError("--idle must be a positive number of seconds")
    if args.store and not args.store.endswith(STORE_SUFFIX):
        raise ScenarioError(f"--store writes a {STORE_SUFFIX} file (got {args.store})")
    if args.force and not (args.record or args.store):
        raise ScenarioError("--force only applies with --record or --store")
    from ..model.scenarios.outputs import check_output, open_output

    for flag, path in (("--record", args.record), ("--store", args.store)):
        if path:
            check_output(path, (), args.force, flag)
    from ..model.kv_wire.publish import open_listener

    listener = open_listener(args.endpoint, args.replay, args.topic)
    from ..model.kv_wire.session import ListenSession
    from ..model.kv_wire.store import ListenStore

    with contextlib.ExitStack() as stack:
        record = stack.enter_context(open_output(args.record, (), args.force, "--record", live=True)) \
            if args.record else None
        store = ListenStore(args.store, args.endpoint) if args.store else None
        session = ListenSession(listener, record=record, store=store)
        stack.callback(session.close)
        _say(f"listening to {args.endpoint}" + (f" (replay {args.replay})" if args.replay else "")
             + ("; Ctrl-C stops" if args.idle is None and args.batches is None else ""), sys.stderr)
        try:
            _loop(session, args)
        except KeyboardInterrupt:
            _say("interrupted", sys.stderr)
        view = session.view
        held = ", ".join(f"{n:,} {m}" for m, n in view.held().items()) or "nothing"
        _say(f"{view.batches:,} batch(es), {view.events:,} event(s); the view holds {held}; "
             f"{view.violations:,} violation(s), {len(view.problems):,} problem line(s)", sys.stdout)
        if store is not None:
            _say(f"stored in {args.store}: urc tui --listen {args.store}", sys.stdout)
        return EXIT_CHECK_FAILED if view.violations else EXIT_OK


def _loop(session, args) -> None:
    last = time.monotonic()
    while args.batches is None or session.view.batches < args.batches:
        outcomes = session.pump(POLL_MS)
        now = time.monotonic()
        if outcomes:
            last = now
        elif args.idle is not None and now - last >= args.idle:
            _say(f"nothing for {args.idle:g} s: stopping", sys.stderr)
            return
        for outcome in outcomes:
            text = getattr(outcome, "text", None)
            if text is not None:
                _say(f"{'note' if outcome.notice else 'problem'}: {text}", sys.stdout)
                continue
            if not args.quiet:
                _say(outcome.summary(), sys.stdout)
            for violation in outcome.violations:
                _say(f"  violation in batch {outcome.seq}: {violation}", sys.stdout)


def _say(line: str, stream) -> None:
    print(elide(line, 400), file=stream, flush=True)
