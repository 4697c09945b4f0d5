"""Tunables of the optimal packer, in one place (tests change some of them); the modules read
them here as ``_tuning.NAME`` at call time, so a patched value takes effect."""
from .._kernels.fill_modes import BEST_FIT, EVEN_PAIR, ROOM_FOR_SHORTEST, SPREAD_SHORT, TINY_BESIDE_HUGE

USE_HIGHS_BINDINGS = True  # False: a cold linprog solve per round (tests exercise this path)
IMPROVE = 1e-9  # a pattern enters when its value exceeds 1 + IMPROVE
LONG_CONTEXT = 1024  # above this L: no column generation unless affordable (see _long_context)
LP_LENGTHS = 1024  # ... affordable: at most this many distinct lengths,
LP_WORK = 3e8  # ... and about this many pricing-DP steps per LP round
IPM_COLUMNS = 12_000  # a primal-simplex master this big at its first solve starts by interior point,
IPM_DEPTH = 16  # ... when its patterns may hold this many sequences or more
MAX_ROUNDS = 10_000  # LP rounds per phase of column generation (status ROUND_LIMIT when reached)
REPAIR_SLOTS = 0.88  # at long context the exchanges run while sequences <= this x depth x the unlimited fill's packs
CLOSE_ENOUGH = 10_000  # a plan within one pack in this many of the bound (0.01 %), or one pack, stops the search

# the exact fill: the modes tried without a depth limit, and with one (TINY_BESIDE_HUGE only
# above LONG_CONTEXT: below, its packs seed the LP worse)
UNLIMITED_MODES = (EVEN_PAIR, BEST_FIT)
DEPTH_MODES = (SPREAD_SHORT, EVEN_PAIR, BEST_FIT, ROOM_FOR_SHORTEST, TINY_BESIDE_HUGE)
SHORT_CONTEXT_DEPTH_MODES = (SPREAD_SHORT, EVEN_PAIR, BEST_FIT, ROOM_FOR_SHORTEST)
# what the exchanges leave is packed again with ``factor * residual`` sequences' worth of free
# slots taken from packs of at least ``wmin`` sequences, fewest first (factor 0: the residual
# alone): the (wmin, factor) pairs tried
MIXES = ((0, 0), (2, 1), (3, 1), (3, 2), (4, 1))

# long context with a depth limit: the grid LPs (optimal/_relaxed.py)
TIME_GOALS = ((8192, 10.0), (32768, 20.0), (65536, 40.0))  # (up to this L, seconds the grid LPs are sized for)
LONGEST_TIME_GOAL = 60.0  # ... above the last L
GRIDS = (1024, 2048, 4096, 8192)  # grid sizes tried in turn while the gap stays open (fixed: deterministic)
GRID_WORK = 6.5e8  # ... a grid is skipped when its LPs' work (grid_work) is above this times time_goal(L) / 10 s
PLAN_SHARE = 0.7  # ... of that work the plan side's finest grid may take (the bound side's grid then takes the rest)
INTERPOLATION_WORK = 1.5e8  # ... the interpolated certificate's DP runs when its work is below this times time_goal(L)
ROUNDINGS = 3  # the plan side's LP is solved again on what its rounding left, at most this many times
REST_GRID = 2048  # ... on a grid of at most this many units
LP_MARGIN = 0.05  # share of the time left that the grid LPs leave to the steps after them
