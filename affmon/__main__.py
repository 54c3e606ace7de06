from affmon.cli import main

raise SystemExit(main())
