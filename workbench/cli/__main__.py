"""``python -m workbench.cli``: the same command line as the ``workbench`` script."""
from workbench.cli import main

main()
