from marketplace.cli import main

raise SystemExit(main())
