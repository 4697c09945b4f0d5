"""The modes of :func:`packlib._kernels.optimal.exact_fill`, by name: each a rule for filling
the gap ``g`` of the pack being built (the kernel's docstring tells them in full). Plain
integers, so that numba reads them as constants and code above the kernels names them
without importing numba. Modes from ``ROOM_FOR_SHORTEST`` on act only with a depth limit.
"""
BEST_FIT = 0  # the longest sequence that fits
LONG_PAIR = 1  # a sequence of exactly g, else the pair closing g with the longer as long as possible
EVEN_PAIR = 2  # the same, the pair as even as possible (short sequences kept for the last packs)
SPREAD_SHORT = 3  # EVEN_PAIR, spreading short sequences over the packs while a depth limit holds
ROOM_FOR_SHORTEST = 4  # the longest that leaves room for the shortest left in each other free slot
TINY_BESIDE_HUGE = 5  # ROOM_FOR_SHORTEST, a huge first sequence taking the tiniest ones beside it
