"""``python -m ollie``: the same as the ``ollie`` command."""
import sys

from ollie.cli import main

sys.exit(main())
