"""``python -m minidp classroom``: record the scenes for real, write the page, serve it.

    python -m minidp classroom                         # record, write classroom/index.html, serve
    python -m minidp classroom --out DIR --no-serve    # just write DIR/index.html
    python -m minidp classroom --trace run.json        # a page from your own trace (torchrun,
                                                       # torch.profiler, any Chrome trace)
    python -m minidp classroom --screenshots diagrams  # also diagrams/classroom_<scene>.png
    python -m minidp classroom --only hsdp --hsdp-mesh 2x2  # one scene (HSDP: 4 processes)

The page opens from ``file://`` offline; serving is ``http.server`` on 127.0.0.1, until
Ctrl-C. A bad input is one line on stderr and exit status 2, never a traceback.

Test: ``pytest tests/test_classroom.py tests/test_classroom_inputs.py``;
serving: ``pytest tests/test_classroom_serve.py``
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import sys
from pathlib import Path

from minidp.tools.classroom.page import load_trace, recognised, trace_notes, write_page
from minidp.tools.classroom.record import SCENE_ORDER, Options, record

NOT_RECOGNISED = (
    "classroom: none of the classroom's scenes are in this trace: the page opens on its "
    "timeline (every track, zoomable; click a bar for its details)"
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="minidp classroom",
        description="Record real runs (ring, server vs ring, DP, DDP, ZeRO/FSDP memory, FSDP, "
        "HSDP) and write one self-contained page that steps through them.",
    )
    p.add_argument("--out", default="classroom", help="folder for index.html (default: classroom)")
    p.add_argument("--no-serve", action="store_true", help="write the page, do not serve it")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--trace", metavar="FILE", help="build the page from this Chrome trace instead")
    p.add_argument("--save-trace", metavar="FILE", help="also save the recorded trace here")
    p.add_argument("--only", help=f"comma-separated scenes to record (of {','.join(SCENE_ORDER)})")
    p.add_argument("--world-size", type=int, default=4, help="ranks in the ring scenes (2-8)")
    p.add_argument("--numel", type=int, default=8, help="elements of the ring's tensor")
    p.add_argument("--devices", type=int, default=4, help="DataParallel's simulated devices")
    p.add_argument("--batch", type=int, default=8, help="DataParallel's batch")
    p.add_argument("--ddp-world-size", type=int, default=2, help="ranks for DDP, ZeRO, FSDP")
    p.add_argument("--width", type=int, default=64, help="MLP width for DDP, ZeRO, FSDP, HSDP")
    p.add_argument(
        "--hsdp-mesh",
        type=_mesh,
        default=(2, 2),
        metavar="RxS",
        help="HSDP: R nodes x S ranks per node, one process each (default 2x2)",
    )
    p.add_argument("--screenshots", metavar="DIR", help="write DIR/classroom_<scene>.png")
    return p


def _mesh(text: str) -> tuple[int, int]:
    """``"2x2"`` -> (2, 2): nodes x ranks per node."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected RxS (nodes x ranks per node, e.g. 2x2), got {text!r}"
        )
    return int(parts[0]), int(parts[1])


def options_from(args: argparse.Namespace) -> Options:
    only = tuple(s.strip() for s in args.only.split(",")) if args.only else SCENE_ORDER
    return Options(world_size=args.world_size, numel=args.numel, devices=args.devices,
                   batch=args.batch, ddp_world=args.ddp_world_size, width=args.width,
                   hsdp_mesh=args.hsdp_mesh, only=only)  # fmt: skip


def serve(folder: Path, port: int = 0) -> None:
    """Serve ``folder`` on 127.0.0.1 until Ctrl-C (the page itself needs no server).

    A port that cannot be opened (in use, privileged) raises ``OSError`` before anything
    is served; ``main`` turns it into a usage error. Lines are flushed at once: whoever
    reads our output through a pipe (a test, ``tee``) needs the address before Ctrl-C."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as httpd:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/"
        print(f"serving on {url}  (Ctrl-C to stop)", flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            print("stopped", flush=True)


def fail(message: str) -> None:
    """One line on stderr, exit status 2 (argparse's usage-error status), no traceback."""
    line = " ".join(str(message).split())  # one line, whatever the message held
    print(f"minidp classroom: error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def save_trace(data: dict, where: str) -> Path:
    """Write ``data`` to ``where`` as JSON; a path that cannot hold it is a ValueError."""
    path = Path(where)
    if path.is_dir():
        raise ValueError(f"classroom: --save-trace {where}: expected a file name, got a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
    except OSError as e:
        raise ValueError(
            f"classroom: --save-trace {where}: cannot write it ({e.strerror or e})"
        ) from e
    return path


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:  # before recording: a bad port must not cost a minute
        parser.error(f"--port: expected 0 (a free one) to 65535, got {args.port}")
    try:
        if args.trace:
            data = load_trace(args.trace)
        else:
            options = options_from(args)
            options.check()  # bad options fail before any rank starts
            data = record(options, progress=lambda line: print(line, flush=True))
        if args.save_trace:
            save_trace(data, args.save_trace)
            print(f"trace saved: {args.save_trace} (also opens in Perfetto)", flush=True)
        existed = (Path(args.out) / "index.html").is_file()
        page = write_page(data, args.out)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    for note in trace_notes(data):
        print(note, flush=True)
    if args.trace and not recognised(data):
        print(NOT_RECOGNISED, flush=True)
    print(f"page {'replaced' if existed else 'written'}: {page} (open it directly, offline: "
          f"{page.resolve().as_uri()})", flush=True)  # fmt: skip
    if args.screenshots:
        from minidp.tools.classroom.shots import screenshots

        for path in screenshots(page, args.screenshots):
            print(f"screenshot: {path}")
    if not args.no_serve:
        try:
            serve(page.parent, args.port)
        except OSError as e:  # in use, or a privileged port: say so, not a traceback
            parser.error(
                f"--port {args.port}: expected a port free to open on 127.0.0.1, got "
                f"{e.strerror or e}. Hint: --port 0 picks a free one; the page needs no "
                f"server: open {page.resolve().as_uri()}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
