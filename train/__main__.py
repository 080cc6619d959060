"""``python -m train``: the trainer's command line (:mod:`train.cli`)."""

import sys

from train.cli import main

sys.exit(main())
