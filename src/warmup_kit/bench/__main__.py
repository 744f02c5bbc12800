"""``python -m warmup_kit.bench``: see :mod:`warmup_kit.bench`."""
from warmup_kit.bench import main

raise SystemExit(main())
