#!/usr/bin/env python3
"""Build a Python weir handler into a component:

    python3 guest-sdk/python/build.py app.py -o app.wasm

`app.py` defines a class `Handler` (subclass weir_guest.Handler; hooks
on_upgrade/on_open/on_message/on_close, see weir_guest/__init__.py). This
script writes a small entry module that exports it as
`weir:gateway/handler` through weir_guest.runtime.export (and, for 0.4.0,
`weir:gateway/state`, check-state: world stateful-handler), then runs
componentize-py (pinned in requirements-build.txt; scripts/build-guests.sh
installs it into guest-sdk/python/.venv) against wit/weir.wit
(weir:gateway 0.4.0: outbound HTTP, timers, the key-value store, deferred
upgrades).

Options: -o OUT (default: app.wasm next to app.py); -p DIR (a folder of
modules the handler imports, repeatable); --world 0.3.0 for a component of
the world before I/O (no kv import, no resume-upgrade: what a gateway
without 0.4.0 runs, and what the tests of `weir check`'s warning use).
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent


def wit_for(world):
    """The folder of the WIT next to the SDK (a project made by `weir new
    --lang python`), else the repository's: weir:gateway 0.4.0 (wit/) or
    0.3.0 (wit/0.3.0/)."""
    sub = "0.3.0" if world == "0.3.0" else ""
    local = HERE / "wit" / sub
    if (local / "weir.wit").is_file():
        return local
    return HERE.parent.parent / "wit" / sub


def componentize_py():
    local = HERE / ".venv" / "bin" / "componentize-py"
    if local.exists():
        return str(local)
    found = shutil.which("componentize-py")
    if found:
        return found
    sys.exit(f"build.py: componentize-py not found; install it with "
             f"`python3 -m venv {HERE / '.venv'} && {HERE / '.venv/bin/pip'} install "
             f"-r {HERE / 'requirements-build.txt'}` (scripts/build-guests.sh does)")


def main():
    ap = argparse.ArgumentParser(description="Build a Python weir handler into a component.")
    ap.add_argument("app", help="the handler module (a .py file defining class Handler)")
    ap.add_argument("-o", "--output", help="the component to write")
    ap.add_argument("-p", "--path", action="append", default=[],
                    help="a folder of modules the handler imports (repeatable)")
    ap.add_argument("--world", default="0.4.0", choices=["0.4.0", "0.3.0"],
                    help="the weir:gateway world to build for (default 0.4.0)")
    args = ap.parse_args()
    app = pathlib.Path(args.app).resolve()
    if not app.is_file() or app.suffix != ".py":
        sys.exit(f"build.py: {app} is not a .py file")
    out = pathlib.Path(args.output).resolve() if args.output else app.with_suffix(".wasm")
    tool = componentize_py()
    with tempfile.TemporaryDirectory(prefix="weir-py-") as work:
        # The app is copied under a fixed module name so that any file name
        # works and nothing else in its folder is bundled.
        shutil.copy(app, os.path.join(work, "weir_app.py"))
        with open(os.path.join(work, "weir_entry.py"), "w", encoding="utf-8") as f:
            f.write("import weir_app\n"
                    "from weir_guest.runtime import export, export_state\n"
                    "Handler = export(getattr(weir_app, 'Handler', None))\n")
            # 0.4.0's optional `state` interface (world stateful-handler): a
            # deploy checks live connections' state against this version.
            if args.world == "0.4.0":
                f.write("State = export_state()\n")
        world = "stateful-handler" if args.world == "0.4.0" else "gateway-handler"
        cmd = [tool, "-d", str(wit_for(args.world)), "-w", world, "componentize",
               "-p", work, "-p", str(HERE)]
        for extra in args.path:
            cmd += ["-p", str(pathlib.Path(extra).resolve())]
        cmd += ["weir_entry", "-o", str(out)]
        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if run.returncode != 0:
            # The Python traceback says what is wrong; componentize-py's own
            # Rust backtrace after it does not.
            sys.stderr.write(run.stdout.split("\nStack backtrace:")[0].rstrip() + "\n")
            sys.exit(f"build.py: componentize-py failed for {app}")


if __name__ == "__main__":
    main()
