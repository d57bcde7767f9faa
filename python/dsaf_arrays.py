"""Host arrays for the dsa-fidelity HDF5 writers (dsa_capture.py, dsa_cache_capture.py):
torch tensors (any device) and array-likes as numpy storage arrays with their schema dtype
(fixtures/SCHEMA.md §4.1), and the schema's finite-value rule (§4.3). numpy only; torch is
imported only when a torch tensor is given."""

import numpy as np

SCHEMA_VERSION = 1  # fixtures/SCHEMA.md

# Dtypes numpy lacks, as (torch view dtype, storage, schema dtype): they travel as their bits.
_BITS_DTYPES = {"bfloat16": ("int16", "<u2", "bf16"), "float8_e4m3fn": ("uint8", "|u1", "f8_e4m3fn"),
                "float8_e8m0fnu": ("uint8", "|u1", "f8_e8m0")}


def host_array(value):
    """(numpy array, schema dtype or None): a torch tensor (on any device: copied to the
    host) or an array-like. bf16 and fp8 come back as their bits with their schema dtype;
    anything else as numpy holds it, with None."""
    if type(value).__module__.split(".")[0] == "torch":
        t = value.detach()
        name = str(t.dtype).replace("torch.", "")
        if name in _BITS_DTYPES:
            import torch  # only when a torch tensor is given: torch is there already
            view, storage, dtype = _BITS_DTYPES[name]
            return t.contiguous().view(getattr(torch, view)).cpu().numpy().view(storage), dtype
        return np.ascontiguousarray(t.cpu().numpy()), None
    a = np.asarray(value)
    if a.dtype.name in _BITS_DTYPES:  # ml_dtypes
        _, storage, dtype = _BITS_DTYPES[a.dtype.name]
        return np.ascontiguousarray(a).view(storage), dtype
    return a, None


def to_numpy(value):
    """(array, schema dtype): the raw storage array ('<u2' for bf16, '<f4' for f32)."""
    a, dtype = host_array(value)
    if dtype == "bf16" or (dtype is None and a.dtype == np.uint16):
        return np.ascontiguousarray(a, dtype="<u2"), "bf16"
    if dtype is not None or a.dtype.kind != "f":
        raise TypeError(f"a {dtype or a.dtype} array is not an activation (float, or uint16 bf16 bits)")
    return np.ascontiguousarray(a, dtype="<f4"), "f32"


def check_finite(name, array, dtype):
    if dtype == "bf16":
        bad = (array & 0x7F80) == 0x7F80  # exponent all ones: Inf or NaN
    elif dtype == "f8_e4m3fn":
        bad = (array & 0x7F) == 0x7F  # S.1111.111 is NaN
    elif dtype == "f8_e8m0":
        bad = array == 0xFF
    elif dtype == "f32":
        bad = ~np.isfinite(array)
    else:
        return
    if bad.any():
        first = int(np.flatnonzero(bad.reshape(-1))[0])
        raise ValueError(f"{name}: element {first} is not finite (fixtures hold finite values)")
