from gpuplan.cli import main

raise SystemExit(main())
