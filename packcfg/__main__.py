import sys

try:
    from packcfg.cli import main
except KeyboardInterrupt:  # Ctrl-C while the interpreter imports the CLI: one line, as main() gives
    print("packcfg: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
