"""``python -m warmup_kit.bench``: see :mod:`warmup_kit.bench`."""
from . import main

raise SystemExit(main())
