// Resampling loops for Resize and GridSample (onnx_light/runtime/kernels/resize.py,
// grid_sample.py): a weighted gather along one axis, and a weighted gather of points.
// Twins: onnx_light/runtime/_native.py (resample_axis_twin, gather_points_twin).
// Indices and weights are computed by the Python kernels (one table per shape); these loops
// only read, weigh and add, float32 or float64, with the GIL released.
// replicate2d: nearest upsampling by whole factors of the last two axes (each cell repeated
// kh x kw times; twin: resize.py's _replicate): one pass writing each output row once, the
// column repeats as register shuffles for 4-byte cells and factor 2, then kh - 1 row copies.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "simd.h"
#include "thread_pool.h"

namespace nb = nanobind;

namespace {

template <typename T>
using In2 = nb::ndarray<const T, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
template <typename T>
using In3 = nb::ndarray<const T, nb::ndim<3>, nb::c_contig, nb::device::cpu>;
template <typename T>
using Out3 = nb::ndarray<nb::numpy, T, nb::ndim<3>>;

template <typename T>
Out3<T> owned(T *y, int64_t a, int64_t b, int64_t c) {
    nb::capsule owner(y, [](void *ptr) noexcept { delete[] static_cast<T *>(ptr); });
    return Out3<T>(y, {static_cast<size_t>(a), static_cast<size_t>(b), static_cast<size_t>(c)}, owner);
}

// y[o, i, :] = sum_k weight[i, k] * x[o, index[i, k], :]  (x: outer, n_in, inner)
template <typename T>
Out3<T> resample_axis(In3<T> x, In2<int64_t> index, In2<T> weight, int threads) {
    const int64_t outer = x.shape(0), n_in = x.shape(1), inner = x.shape(2);
    const int64_t n_out = index.shape(0), taps = index.shape(1);
    if (weight.shape(0) != index.shape(0) || weight.shape(1) != index.shape(1))
        throw std::invalid_argument("resample_axis: index and weight must have the same shape (n_out, taps)");
    if (taps < 1) throw std::invalid_argument("resample_axis: at least one tap");
    if (threads < 1 || threads > 64) throw std::invalid_argument("resample_axis: threads must be in [1, 64]");
    const int64_t *idx = index.data();
    for (int64_t q = 0; q < n_out * taps; ++q)
        if (idx[q] < 0 || idx[q] >= n_in) throw std::invalid_argument("resample_axis: index out of range");
    T *y = new T[std::max<int64_t>(outer * n_out * inner, 1)];
    {
        nb::gil_scoped_release release;
        const T *xs = x.data(), *w = weight.data();
        // items: runs of `per` output rows (o, i) of about 16k multiply-adds each
        const int64_t rows = outer * n_out, per = std::max<int64_t>(1, 16384 / std::max<int64_t>(taps * inner, 1));
        onnx_light_pool::parallel_items(threads, (rows + per - 1) / per, [&](int, int64_t item) {
            for (int64_t row = item * per; row < std::min(rows, (item + 1) * per); ++row) {
                const int64_t o = row / n_out, i = row % n_out;
                const T *plane = xs + o * n_in * inner;
                T *dst = y + (o * n_out + i) * inner;
                const int64_t *ii = idx + i * taps;
                const T *wi = w + i * taps;
                if (inner == 1) {  // the last axis: one sum per output element
                    T acc = 0;
                    for (int64_t k = 0; k < taps; ++k) acc += wi[k] * plane[ii[k]];
                    *dst = acc;
                    continue;
                }
                const T *src = plane + ii[0] * inner;
                const T w0 = wi[0];
                for (int64_t j = 0; j < inner; ++j) dst[j] = w0 * src[j];
                for (int64_t k = 1; k < taps; ++k) {
                    const T *s = plane + ii[k] * inner;
                    const T wk = wi[k];
                    for (int64_t j = 0; j < inner; ++j) dst[j] += wk * s[j];
                }
            }
        });
    }
    return owned(y, outer, n_out, inner);
}

// y[b, c, p] = sum_k weight[k, b, p] * x[b, c, index[k, b, p]]  (x: batch, channels, size)
//
// Per batch item the plane is first transposed to channels-last, so that each tap reads one
// contiguous row of all channels and the weighted sum runs (vectorised) over channels; a
// block of points is accumulated channels-last and transposed into the channels-first output.
template <typename T>
Out3<T> gather_points(In3<T> x, In3<int64_t> index, In3<T> weight) {
    const int64_t batch = x.shape(0), channels = x.shape(1), size = x.shape(2);
    const int64_t taps = index.shape(0), points = index.shape(2);
    const auto dim = [](size_t d) { return static_cast<int64_t>(d); };
    if (dim(index.shape(1)) != batch || dim(weight.shape(0)) != taps || dim(weight.shape(1)) != batch ||
        dim(weight.shape(2)) != points)
        throw std::invalid_argument("gather_points: index and weight must both be (taps, batch, points)");
    const int64_t *idx = index.data();
    for (int64_t q = 0; q < taps * batch * points; ++q)
        if (idx[q] < 0 || idx[q] >= size) throw std::invalid_argument("gather_points: index out of range");
    T *y = new T[std::max<int64_t>(batch * channels * points, 1)];
    {
        nb::gil_scoped_release release;
        const T *xs = x.data(), *w = weight.data();
        const int64_t tap_stride = batch * points;
        constexpr int64_t block = 64;  // points accumulated channels-last before the transpose
        std::vector<T> rows(static_cast<size_t>(std::max<int64_t>(size * channels, 1)));
        std::vector<T> acc(static_cast<size_t>(std::max<int64_t>(block * channels, 1)));
        for (int64_t b = 0; b < batch; ++b) {
            const T *plane = xs + b * channels * size;
            for (int64_t s0 = 0; s0 < size; s0 += block) {  // (C, S) -> (S, C), in tiles
                const int64_t s1 = std::min(size, s0 + block);
                for (int64_t c = 0; c < channels; ++c)
                    for (int64_t s = s0; s < s1; ++s) rows[s * channels + c] = plane[c * size + s];
            }
            const int64_t *ib = idx + b * points;
            const T *wb = w + b * points;
            for (int64_t p0 = 0; p0 < points; p0 += block) {
                const int64_t p1 = std::min(points, p0 + block);
                std::fill(acc.begin(), acc.end(), T(0));
                for (int64_t p = p0; p < p1; ++p) {
                    T *a = acc.data() + (p - p0) * channels;
                    for (int64_t k = 0; k < taps; ++k) {
                        const T wk = wb[k * tap_stride + p];
                        if (wk == T(0)) continue;
                        const T *row = rows.data() + ib[k * tap_stride + p] * channels;
                        for (int64_t c = 0; c < channels; ++c) a[c] += wk * row[c];
                    }
                }
                T *dst = y + b * channels * points;
                for (int64_t c = 0; c < channels; ++c)
                    for (int64_t p = p0; p < p1; ++p) dst[c * points + p] = acc[(p - p0) * channels + c];
            }
        }
    }
    return owned(y, batch, channels, points);
}


#if ONNX_LIGHT_AVX512
// dst[2j] = dst[2j + 1] = src[j] for the whole vectors of 8 4-byte cells; returns the cells done
AVX2 int64_t double_cells_avx2(const uint32_t *src, uint32_t *dst, int64_t w) {
    int64_t j = 0;
    for (; j + 8 <= w; j += 8) {
        const __m256 v = _mm256_loadu_ps(reinterpret_cast<const float *>(src + j));
        const __m256 lo = _mm256_unpacklo_ps(v, v), hi = _mm256_unpackhi_ps(v, v);  // 0 0 1 1 | 4 4 5 5 ...
        _mm256_storeu_ps(reinterpret_cast<float *>(dst + 2 * j), _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(reinterpret_cast<float *>(dst + 2 * j + 8), _mm256_permute2f128_ps(lo, hi, 0x31));
    }
    return j;
}
#endif

template <typename T>
using In3w = nb::ndarray<T, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

// y[p, i, j] = x[p, i / kh, j / kw] (x: planes, h, w; y: planes, h * kh, w * kw, written in place)
template <typename T>
void replicate2d(In3<T> x, In3w<T> y, int threads) {
    const int64_t planes = x.shape(0), h = x.shape(1), w = x.shape(2);
    const int64_t ho = y.shape(1), wo = y.shape(2);
    if (static_cast<int64_t>(y.shape(0)) != planes || h == 0 || w == 0 || ho % h || wo % w)
        throw std::invalid_argument("replicate2d: y must be (planes, h * kh, w * kw) of x (planes, h, w)");
    if (threads < 1 || threads > 64) throw std::invalid_argument("replicate2d: threads must be in [1, 64]");
    const int64_t kh = ho / h, kw = wo / w;
    const T *xs = x.data();
    T *ys = y.data();
    const bool simd = sizeof(T) == 4 && kw == 2 && has_avx2_fma();
    nb::gil_scoped_release release;
    onnx_light_pool::parallel_items(threads, planes, [&](int, int64_t p) {
        for (int64_t r = 0; r < h; ++r) {
            const T *src = xs + (p * h + r) * w;
            T *dst = ys + (p * ho + r * kh) * wo;
            int64_t j = 0;
            if (kw == 1) {
                std::memcpy(dst, src, static_cast<size_t>(w) * sizeof(T));
                j = w;
            }
#if ONNX_LIGHT_AVX512
            if constexpr (sizeof(T) == 4) {
                if (simd)
                    j = double_cells_avx2(reinterpret_cast<const uint32_t *>(src), reinterpret_cast<uint32_t *>(dst), w);
            }
#endif
            for (; j < w; ++j)
                for (int64_t t = 0; t < kw; ++t) dst[j * kw + t] = src[j];
            for (int64_t t = 1; t < kh; ++t) std::memcpy(dst + t * wo, dst, static_cast<size_t>(wo) * sizeof(T));
        }
    });
}

}  // namespace

void bind_resample(nb::module_ &m) {
    m.def("resample_axis", &resample_axis<float>, nb::arg("x"), nb::arg("index"), nb::arg("weight"),
          nb::arg("threads") = 1);
    m.def("resample_axis", &resample_axis<double>, nb::arg("x"), nb::arg("index"), nb::arg("weight"),
          nb::arg("threads") = 1);
    m.def("gather_points", &gather_points<float>, nb::arg("x"), nb::arg("index"), nb::arg("weight"));
    m.def("gather_points", &gather_points<double>, nb::arg("x"), nb::arg("index"), nb::arg("weight"));
    m.def("replicate2d", &replicate2d<uint8_t>, nb::arg("x"), nb::arg("y"), nb::arg("threads") = 1);
    m.def("replicate2d", &replicate2d<uint16_t>, nb::arg("x"), nb::arg("y"), nb::arg("threads") = 1);
    m.def("replicate2d", &replicate2d<uint32_t>, nb::arg("x"), nb::arg("y"), nb::arg("threads") = 1);
    m.def("replicate2d", &replicate2d<uint64_t>, nb::arg("x"), nb::arg("y"), nb::arg("threads") = 1);
}
