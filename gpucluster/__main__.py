from gpucluster.cli import main

raise SystemExit(main())
