"""`python -m tools.simulate [args]`: the same as `./dev simulate [args]`."""

from tools.simulate import main

main()
