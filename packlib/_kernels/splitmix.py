"""SplitMix64's constants, defined once (Steele, Lea and Flood, "Fast splittable
pseudorandom number generators", OOPSLA 2014): plain integers, so that code above the
kernels reads them without importing numba; :mod:`packlib._kernels.rng` is the generator.
"""
GAMMA = 0x9E3779B97F4A7C15  # the increment: 2**64 / the golden ratio, odd
MIX1 = 0xBF58476D1CE4E5B9  # the finaliser's multipliers
MIX2 = 0x94D049BB133111EB
