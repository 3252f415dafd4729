import sys

from dlbench.cli import main

sys.exit(main())
