"""Tunables of the optimal packer, in one place (tests change some of them)."""
USE_HIGHS_BINDINGS = True  # False: a cold linprog solve per round (tests exercise this path)
IMPROVE = 1e-9  # a pattern enters when its value exceeds 1 + IMPROVE
LONG_CONTEXT = 1024  # above this L: no column generation unless affordable (see _long_context)
LP_LENGTHS = 1024  # ... affordable: at most this many distinct lengths,
LP_WORK = 3e8  # ... and about this many pricing-DP steps per LP round
IPM_COLUMNS = 12_000  # a primal-simplex master this big at its first solve starts by interior point,
IPM_DEPTH = 16  # ... when its patterns may hold this many sequences or more
MAX_ROUNDS = 10_000  # LP rounds per phase of column generation (status 2 when reached)
REPAIR_SLOTS = 0.88  # at long context the exchanges run while sequences <= this x depth x the unlimited fill's packs
