"""Checks of the Python values handed to the C library, shared by every front end (_core, _torch):
C ints, flags and paths. Each error names the parameter and the value the user gave; nothing
reaches ctypes (which would wrap an int to 32 bits, or encode any object's str()) unchecked.
"""
from __future__ import annotations

import operator
import os

__all__ = ["c_int", "c_uint64", "flag", "path", "INT_MIN", "INT_MAX", "UINT64_MAX"]

INT_MIN, INT_MAX = -2**31, 2**31 - 1      # the C int of the library's structs (ILP32 / LP64)
UINT64_MAX = 2**64 - 1


def _is_bool(x) -> bool:
    return isinstance(x, bool) or (type(x).__module__ == "numpy" and
                                   type(x).__name__ in ("bool_", "bool"))


def _integer(name, value) -> int:
    if _is_bool(value):
        raise TypeError(f"fa3jit: {name} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"fa3jit: {name} must be an int, got {value!r}") from None


def c_int(name, value) -> int:
    """value as a C int: an integer (int, or any object with __index__ such as numpy.int64, but
    not a bool) in INT_MIN..INT_MAX, else TypeError / ValueError naming name and value. The range
    only: whether the library supports the number is for the library to say."""
    i = _integer(name, value)
    if not INT_MIN <= i <= INT_MAX:
        raise ValueError(f"fa3jit: {name} {i} is out of range (a C int: {INT_MIN}..{INT_MAX})")
    return i


def c_uint64(name, value) -> int:
    """value as a C uint64_t (a seed): an integer as c_int takes them, in 0..2**64-1."""
    i = _integer(name, value)
    if not 0 <= i <= UINT64_MAX:
        raise ValueError(f"fa3jit: {name} {i} is out of range (a uint64: 0..{UINT64_MAX})")
    return i


def flag(name, value) -> bool:
    """A flag: True/False (numpy's bool too) or the integer 0/1; anything else ('no', 2, None,
    1.0, ...) is refused with TypeError, never read as truthy."""
    if _is_bool(value):
        return bool(value)
    try:
        i = operator.index(value)
    except TypeError:
        i = None
    if i not in (0, 1):
        raise TypeError(f"fa3jit: {name} must be a bool, got {value!r}")
    return bool(i)


def path(name, value) -> bytes:
    """A file system path as the C string the library gets: str (surrogate-escaped names too),
    bytes or os.PathLike, through os.fsencode. Other types are a TypeError; an empty path or one
    with an embedded NUL (C would cut it there) a ValueError."""
    try:
        b = os.fsencode(value)
    except TypeError:
        raise TypeError(f"fa3jit: {name} must be a str, bytes or os.PathLike path, got "
                        f"{value!r}") from None
    if not b:
        raise ValueError(f"fa3jit: {name} {value!r} is empty (None selects the default)")
    if b"\0" in b:
        raise ValueError(f"fa3jit: {name} {value!r} contains a NUL character")
    return b
