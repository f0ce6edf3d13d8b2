"""``python -m lookup_source``: the same as the ``asynclookup`` command."""

import sys

from lookup_source.cli import main

sys.exit(main())
