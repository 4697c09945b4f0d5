"""An in-place sort of int arrays, written out so that no library sort needs compiling."""
from .._jit import jit


@jit
def sort_ints(a):
    """Sort the int array ``a`` in place, ascending: heapsort, ``O(n log n)`` at worst.

    Integers sort to one order whatever the algorithm, so this equals ``a.sort()``; numba's
    own sort is a family of functions that take seconds to compile, this is one small one.
    """
    start = a.size // 2
    end = a.size
    while end > 1:
        if start > 0:  # build the max-heap, one subtree at a time ...
            start -= 1
        else:  # ... then move its top behind the heap, which shrinks by one
            end -= 1
            t = a[end]
            a[end] = a[0]
            a[0] = t
        root = start
        while 2 * root + 1 < end:  # sift the root down
            child = 2 * root + 1
            if child + 1 < end and a[child + 1] > a[child]:
                child += 1
            if a[child] <= a[root]:
                break
            t = a[child]
            a[child] = a[root]
            a[root] = t
            root = child
