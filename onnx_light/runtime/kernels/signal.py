"""Signal processing: DFT, STFT, the Hann/Hamming/Blackman windows and MelWeightMatrix.

Complex values travel as a trailing axis of 2 (real, imaginary); a real signal may
have a trailing axis of 1.
"""

from __future__ import annotations

import numpy as np

from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._axes import axis_index
from onnx_light.runtime.kernels._dtypes import np_dtype


def _as_complex(x: np.ndarray) -> np.ndarray:
    """A signal ``[..., 1]`` or ``[..., 2]`` as a complex array without the trailing axis."""
    if x.shape[-1] == 1:
        return x[..., 0].astype(np.complex128)
    if x.shape[-1] == 2:
        return x[..., 0].astype(np.float64) + 1j * x[..., 1].astype(np.float64)
    raise ValueError(f"the last axis of a signal must be 1 (real) or 2 (complex), got shape {x.shape}")


def _as_pairs(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def _dft(x: np.ndarray, length: int | None, axis: int, inverse: int, onesided: int) -> np.ndarray:
    """The DFT of the signal ``x`` along ``axis`` (of the signal without its complex axis)."""
    z = _as_complex(x)
    if not -z.ndim <= axis < z.ndim:
        raise ValueError(f"axis {axis} is out of range for a signal of rank {z.ndim} (plus the complex axis)")
    if z.dtype == np.complex128 and x.dtype == np.float32:
        z = z.astype(np.complex64)  # rounding as the float32 references do
    if inverse and onesided:  # a one-sided spectrum back to a real signal
        n = 2 * (z.shape[axis] - 1) if length is None else int(length)
        return np.fft.irfft(z, n=n, axis=axis)[..., np.newaxis].astype(x.dtype)
    n = z.shape[axis] if length is None else int(length)
    y = np.fft.ifft(z, n=n, axis=axis) if inverse else np.fft.fft(z, n=n, axis=axis)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return _as_pairs(y, x.dtype)


def _scalar(v: np.ndarray | None) -> int | None:
    return None if v is None or v.size == 0 else int(np.asarray(v).reshape(-1)[0])


@kernel("", "DFT", since=17)
def dft17(
    x: np.ndarray, dft_length: np.ndarray | None = None, *, axis: int = 1, inverse: int = 0, onesided: int = 0
) -> np.ndarray:
    """DFT along the attribute ``axis`` (counted over the signal without its complex axis)."""
    ax = axis_index(axis, x.ndim)
    return _dft(x, _scalar(dft_length), ax, inverse, onesided)


@kernel("", "DFT", since=20)
def dft20(
    x: np.ndarray,
    dft_length: np.ndarray | None = None,
    axis: np.ndarray | None = None,
    *,
    inverse: int = 0,
    onesided: int = 0,
) -> np.ndarray:
    """DFT along the input ``axis`` (default -2), counted over the full input with its complex axis."""
    ax = _scalar(axis)
    ax = -2 if ax is None else ax
    ax = ax + x.ndim if ax < 0 else ax
    if ax == x.ndim - 1:
        raise ValueError("DFT: axis may not be the last (complex) axis")
    return _dft(x, _scalar(dft_length), ax, inverse, onesided)


@kernel("", "STFT", since=17)
def stft(
    signal: np.ndarray,
    frame_step: np.ndarray,
    window: np.ndarray | None = None,
    frame_length: np.ndarray | None = None,
    *,
    onesided: int = 1,
) -> np.ndarray:
    """Short-time Fourier transform: ``[batch, frames, bins, 2]`` of windowed frames of ``signal``."""
    step = _scalar(frame_step)
    length = _scalar(frame_length)
    if length is None:
        if window is None:
            raise ValueError("STFT needs a window or a frame_length")
        length = window.shape[0]
    if window is not None and window.shape[0] != length:
        raise ValueError(f"STFT: window length {window.shape[0]} differs from frame_length {length}")
    if step is None or step <= 0 or length <= 0 or length > signal.shape[1]:
        raise ValueError(f"STFT: bad frame_step {step} / frame_length {length} for a signal of {signal.shape[1]}")
    z = _as_complex(signal)  # [batch, len]
    frames = (z.shape[1] - length) // step + 1
    idx = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    seg = z[:, idx]  # [batch, frames, length]
    if window is not None:
        seg = seg * window.astype(np.float64)
    y = np.fft.fft(seg, axis=-1)
    if onesided:
        y = y[..., : length // 2 + 1]
    return _as_pairs(y, signal.dtype)


def _window(size: np.ndarray, periodic: int, output_datatype: int, coefs: tuple[float, ...]) -> np.ndarray:
    """``sum_k (-1)**k coefs[k] cos(2 pi k n / N)``, N = size (periodic) or size - 1."""
    m = _scalar(size)
    if m is None or m < 0:
        raise ValueError(f"a window size must be a non-negative scalar, got {size}")
    denom = m if periodic else m - 1
    n = np.arange(m, dtype=np.float64)
    w = np.zeros(m)
    for k, c in enumerate(coefs):
        w += (-1) ** k * c * np.cos(2 * np.pi * k * n / denom) if denom else (c if k == 0 else 0.0)
    return w.astype(np_dtype(output_datatype))


@kernel("", "HannWindow", since=17)
def hann_window(size: np.ndarray, *, periodic: int = 1, output_datatype: int = 1) -> np.ndarray:
    """Hann window: ``0.5 - 0.5 cos(2 pi n / N)``."""
    return _window(size, periodic, output_datatype, (0.5, 0.5))


@kernel("", "HammingWindow", since=17)
def hamming_window(size: np.ndarray, *, periodic: int = 1, output_datatype: int = 1) -> np.ndarray:
    """Hamming window: ``25/46 - 21/46 cos(2 pi n / N)``."""
    return _window(size, periodic, output_datatype, (25 / 46, 21 / 46))


@kernel("", "BlackmanWindow", since=17)
def blackman_window(size: np.ndarray, *, periodic: int = 1, output_datatype: int = 1) -> np.ndarray:
    """Blackman window: ``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``."""
    return _window(size, periodic, output_datatype, (0.42, 0.5, 0.08))


@kernel("", "MelWeightMatrix", since=17)
def mel_weight_matrix(
    num_mel_bins: np.ndarray,
    dft_length: np.ndarray,
    sample_rate: np.ndarray,
    lower_edge_hertz: np.ndarray,
    upper_edge_hertz: np.ndarray,
    *,
    output_datatype: int = 1,
) -> np.ndarray:
    """Triangular mel filters of peak 1, ``[dft_length // 2 + 1, num_mel_bins]``; mel(f) = 2595 log10(1 + f/700)."""
    bins, n_fft, rate = int(num_mel_bins), int(dft_length), int(sample_rate)
    lo, hi = float(lower_edge_hertz), float(upper_edge_hertz)
    mel_lo, mel_hi = 2595 * np.log10(1 + lo / 700), 2595 * np.log10(1 + hi / 700)
    mels = np.arange(bins + 2) * ((mel_hi - mel_lo) / (bins + 2)) + mel_lo
    hz = 700 * (10 ** (mels / 2595) - 1)
    points = (((n_fft + 1) * hz) // rate).astype(np.int64)
    out = np.zeros((n_fft // 2 + 1, bins))
    j = np.arange(out.shape[0])
    for i in range(bins):
        left, center, right = points[i], points[i + 1], points[i + 2]
        if center == left:
            out[center, i] = 1.0
        else:
            rise = (j >= left) & (j <= center)
            out[rise, i] = (j[rise] - left) / (center - left)
        if right > center:
            fall = (j >= center) & (j < right)
            out[fall, i] = (right - j[fall]) / (right - center)
    return out.astype(np_dtype(output_datatype))
