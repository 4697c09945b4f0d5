"""Numba kernels: arrays in, arrays out; no Python objects, I/O or printing.

One module per algorithm family. Public modules import these lazily (inside functions), so
``import packlib`` never imports numba. All kernels use the one policy in ``packlib._jit``.
"""
