"""`python -m tools.lifecycle [args]`: the same as `./dev lifecycle [args]`."""

from tools.lifecycle import main

raise SystemExit(main())
