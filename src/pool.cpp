// Float32 max pooling without indices (the MaxPool of CNN inference), separable:
// per (n, c) plane, each input row is first reduced over the window's columns
// (hmax[r][j] = max_b x[r][j*sw + b*dw - pad_left]), then each output row is the maximum
// of the window's rows of hmax. That is kh + kw taps per output instead of kh * kw, and
// the padding is never materialised: a row buffer with -inf borders stands in for the
// columns outside the input, and rows outside it are skipped. A NaN in a window makes
// its maximum NaN, as numpy's maximum (the twin, onnx_light/runtime/_native.py) does.
// Column strides 1 and 2 run 8 outputs per AVX2 instruction; other strides are scalar. A window
// with no input cell gives the lowest float (onnxruntime's answer). `out`: the buffer pool's array.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include "simd.h"
#include "thread_pool.h"

namespace nb = nanobind;

namespace {

using In4f = nb::ndarray<const float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using Out4f = nb::ndarray<nb::numpy, float, nb::ndim<4>>;

inline float max_nan(float a, float b) {
    const float m = b > a ? b : a;
    return b != b ? b : (a != a ? a : m);
}

struct Geometry {
    int64_t kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left, h, w;
    int64_t stride;  // of the hmax rows: ow rounded up to whole vectors
    int64_t row_len() const { return (ow - 1) * sw + (kw - 1) * dw + 1; }  // padded columns read
};

// hrow[j] = max_b row[j*sw + b*dw] for j < ow (row: a padded row of row_len() + 16 floats)
void hmax_scalar(const float *row, float *hrow, const Geometry &g, int64_t from) {
    for (int64_t j = from; j < g.ow; ++j) {
        float m = row[j * g.sw];
        for (int64_t b = 1; b < g.kw; ++b) m = max_nan(m, row[j * g.sw + b * g.dw]);
        hrow[j] = m;
    }
}

// y[j] = max over the valid rows of hmax (rows: pointers to hmax rows; none valid: -inf)
void vmax_scalar(const float *const *rows, int64_t n, float *y, int64_t ow, int64_t from) {
    for (int64_t j = from; j < ow; ++j) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t a = 0; a < n; ++a) m = a ? max_nan(m, rows[a][j]) : rows[a][j];
        y[j] = m;
    }
}

#if ONNX_LIGHT_AVX512
// max(a, b), NaN if either is NaN: maxps gives its second operand when either is NaN
AVX2 inline __m256 max_nan8(__m256 a, __m256 b) {
    const __m256 m = _mm256_max_ps(b, a);  // a where either is NaN
    return _mm256_blendv_ps(m, b, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
}

// the even elements of p[0..15]
AVX2 inline __m256 evens(const float *p) {
    const __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
    const __m256 s = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));  // lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), _MM_SHUFFLE(3, 1, 2, 0)));
}

// whole vectors: hrow has room up to ow rounded up to 8, row 16 floats beyond what windows read
AVX2 int64_t hmax_avx2(const float *row, float *hrow, const Geometry &g) {
    int64_t j = 0;
    if (g.sw == 1) {
        for (; j < g.ow; j += 8) {
            __m256 m = _mm256_loadu_ps(row + j);
            for (int64_t b = 1; b < g.kw; ++b) m = max_nan8(m, _mm256_loadu_ps(row + j + b * g.dw));
            _mm256_storeu_ps(hrow + j, m);
        }
    } else if (g.sw == 2) {
        for (; j < g.ow; j += 8) {
            __m256 m = evens(row + 2 * j);
            for (int64_t b = 1; b < g.kw; ++b) m = max_nan8(m, evens(row + 2 * j + b * g.dw));
            _mm256_storeu_ps(hrow + j, m);
        }
    }
    return std::min(j, g.ow);
}

// whole vectors read from the hmax rows (padded to 8), the last one stored masked
AVX2 int64_t vmax_avx2(const float *const *rows, int64_t n, float *y, int64_t ow) {
    if (n == 0) return 0;
    for (int64_t j = 0; j < ow; j += 8) {
        __m256 m = _mm256_loadu_ps(rows[0] + j);
        for (int64_t a = 1; a < n; ++a) m = max_nan8(m, _mm256_loadu_ps(rows[a] + j));
        if (j + 8 <= ow) {
            _mm256_storeu_ps(y + j, m);
        } else {  // through a local block: masked stores are microcoded on some x86 cores (AMD)
            alignas(32) float block[8];
            _mm256_store_ps(block, m);
            for (int64_t k = 0; k < ow - j; ++k) y[j + k] = block[k];
        }
    }
    return ow;
}
#endif

// empty: the output columns whose windows hold no input column (their outputs are the lowest
// float, as onnxruntime gives a window with no input cell)
void pool_plane(const float *x, float *y, const Geometry &g, std::vector<float> &row, std::vector<float> &hmax,
                const std::vector<int64_t> &empty, bool simd) {
    const float lowest = std::numeric_limits<float>::lowest();
    // hmax of every input row (rows no window reads are skipped)
    for (int64_t r = 0; r < g.h; ++r) {
        std::copy(x + r * g.w, x + (r + 1) * g.w, row.begin() + g.pad_left);
        float *hrow = hmax.data() + r * g.stride;
        int64_t done = 0;
#if ONNX_LIGHT_AVX512
        if (simd) done = hmax_avx2(row.data(), hrow, g);
#endif
        hmax_scalar(row.data(), hrow, g, done);
    }
    const float *rows[64];  // the window rows of hmax per output row (on the heap past 64)
    std::vector<const float *> many(g.kh > 64 ? static_cast<size_t>(g.kh) : 0);
    const float **row_ptrs = g.kh > 64 ? many.data() : rows;
    for (int64_t i = 0; i < g.oh; ++i) {
        int64_t n = 0;
        for (int64_t a = 0; a < g.kh; ++a) {
            const int64_t r = i * g.sh + a * g.dh - g.pad_top;
            if (r >= 0 && r < g.h) row_ptrs[n++] = hmax.data() + r * g.stride;
        }
        float *yrow = y + i * g.ow;
        int64_t done = 0;
#if ONNX_LIGHT_AVX512
        if (simd) done = vmax_avx2(row_ptrs, n, yrow, g.ow);
#endif
        vmax_scalar(row_ptrs, n, yrow, g.ow, done);
        if (n == 0) std::fill(yrow, yrow + g.ow, lowest);
        for (const int64_t j : empty) yrow[j] = lowest;
    }
}

using Lent4f = nb::ndarray<float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

// Whether `out` (the buffer pool's array) is a writeable C-contiguous float32 array of exactly
// n x c x oh x ow that does not overlap x (then the result goes there and `out` is returned)
bool takes_out(nb::handle out, const In4f &x, int64_t oh, int64_t ow, Lent4f &lent) {
    if (!out.is_valid() || out.is_none() || !nb::try_cast(out, lent, false)) return false;
    if (lent.shape(0) != x.shape(0) || lent.shape(1) != x.shape(1) || static_cast<int64_t>(lent.shape(2)) != oh ||
        static_cast<int64_t>(lent.shape(3)) != ow)
        return false;
    const float *a = lent.data(), *e = a + lent.size(), *lo = x.data(), *hi = lo + x.size();
    return lent.size() == 0 || !(a < hi && lo < e);
}

nb::object max_pool2d_f32(In4f x, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t oh,
                          int64_t ow, int64_t pad_top, int64_t pad_left, int threads, nb::handle out) {
    const int64_t n = x.shape(0), c = x.shape(1);
    const Geometry g{kh,       kw,      sh, sw, dh, dw, oh, ow, pad_top, pad_left, int64_t(x.shape(2)),
                     int64_t(x.shape(3)), (ow + 7) / 8 * 8};
    if (kh <= 0 || kw <= 0 || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0 || oh < 0 || ow < 0 || pad_top < 0 ||
        pad_left < 0)
        throw std::invalid_argument("max_pool2d_f32: kernel, strides, dilations must be positive, pads not negative");
    if (threads < 1 || threads > 64) throw std::invalid_argument("max_pool2d_f32: threads must be in [1, 64]");
    const size_t out_size = static_cast<size_t>(n * c * oh * ow);
    Lent4f lent;
    const bool lent_out = takes_out(out, x, oh, ow, lent);
    std::unique_ptr<float[]> fresh(lent_out ? nullptr : new float[out_size ? out_size : 1]);
    float *y = lent_out ? lent.data() : fresh.get();
    std::vector<int64_t> empty;  // output columns whose windows read no input column
    for (int64_t j = 0; j < ow; ++j) {
        bool any = false;
        for (int64_t b = 0; b < kw && !any; ++b) any = j * sw + b * dw - pad_left >= 0 && j * sw + b * dw - pad_left < g.w;
        if (!any) empty.push_back(j);
    }
    if (out_size) {
        nb::gil_scoped_release release;
        // the padded row: pad_left -inf, the row, then -inf up to what the windows (and the
        // last 16-float vector load) read
        const int64_t len = std::max(g.row_len(), pad_left + g.w) + 16;
        threads = static_cast<int>(std::min<int64_t>(threads, n * c));
        // one padded row and one hmax plane per worker; the planes are the pool's items
        std::vector<std::vector<float>> row(threads, std::vector<float>(len, -std::numeric_limits<float>::infinity()));
        std::vector<std::vector<float>> hmax(threads, std::vector<float>(g.h * g.stride));
        const bool simd = has_avx2_fma();
        const float *xs = x.data();
        onnx_light_pool::parallel_items(threads, n * c, [&](int worker, int64_t p) {
            pool_plane(xs + p * g.h * g.w, y + p * oh * ow, g, row[worker], hmax[worker], empty, simd);
        });
    }
    if (lent_out) return nb::borrow(out);
    nb::capsule owner(y, [](void *ptr) noexcept { delete[] static_cast<float *>(ptr); });
    fresh.release();
    return nb::cast(Out4f(y, {size_t(n), size_t(c), size_t(oh), size_t(ow)}, owner));
}

}  // namespace

void bind_pool(nb::module_ &m) {
    m.def("max_pool2d_f32", &max_pool2d_f32, nb::arg("x"), nb::arg("kh"), nb::arg("kw"), nb::arg("sh"), nb::arg("sw"),
          nb::arg("dh"), nb::arg("dw"), nb::arg("oh"), nb::arg("ow"), nb::arg("pad_top"), nb::arg("pad_left"),
          nb::arg("threads") = 1, nb::arg("out").none() = nb::none());
}
