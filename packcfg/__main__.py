from packcfg.cli import main

raise SystemExit(main())
