"""Checks of the Python values handed to the C library, shared by every front end (_core, _torch):
C ints, flags and paths. Each error names the parameter and the value the user gave; nothing
reaches ctypes (which would wrap an int to 32 bits, or encode any object's str()) unchecked.
"""
from __future__ import annotations

import operator

__all__ = ["c_int", "INT_MIN", "INT_MAX"]

INT_MIN, INT_MAX = -2**31, 2**31 - 1      # the C int of the library's structs (ILP32 / LP64)


def c_int(name, value) -> int:
    """value as a C int: an integer (int, or any object with __index__ such as numpy.int64, but
    not bool) in INT_MIN..INT_MAX, else TypeError / ValueError naming name and value. The range
    only: whether the library supports the number is for the library to say."""
    if isinstance(value, bool):
        raise TypeError(f"fa3jit: {name} must be an int, got {value!r}")
    try:
        i = operator.index(value)
    except TypeError:
        raise TypeError(f"fa3jit: {name} must be an int, got {value!r}") from None
    if not INT_MIN <= i <= INT_MAX:
        raise ValueError(f"fa3jit: {name} {i} is out of range (a C int: {INT_MIN}..{INT_MAX})")
    return i
