// Float32 max pooling without indices (the MaxPool of CNN inference), separable, rows first:
// per (n, c) plane and output row, the window's input rows are reduced element-wise into one
// padded row (v[j] = max_a x[i*sh + a*dh - pad_top][j]), then each output is the maximum of
// its window's columns of that row (y[i][j] = max_b v[j*sw + b*dw - pad_left]). That is
// kh + kw taps per output instead of kh * kw, the column pass runs once per output row (not
// per input row: half the shuffles for stride 2), and the padding is never materialised: the
// row buffer's -inf borders stand in for the columns outside the input, rows outside it are
// skipped. A NaN in a window makes its maximum NaN, as numpy's maximum (the twin,
// onnx_light/runtime/_native.py, which reduces in the same order) does. Column strides 1 and 2
// run 8 outputs per AVX2 instruction; other strides are scalar. A window with no input cell
// gives the lowest float (onnxruntime's answer). `out`: the buffer pool's array.
//
// mean_rows_f32: GlobalAveragePool's mean of each row of a (planes, cells) float32 matrix, in
// numpy's pairwise summation order (so bitwise the twin's np.add.reduce, divided in float32).
//
// scatter_add_flat: y[index[i]] += u[i] in order of i on a flat array (ScatterElements with
// reduction "add" on one axis: the gradient of a MaxPool whose windows overlap), so bitwise the
// twin's np.add.at; negative indices count from the end, any other out-of-range one raises
// before anything is written.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pairwise.h"
#include "simd.h"
#include "thread_pool.h"

namespace nb = nanobind;

namespace {

using In4f = nb::ndarray<const float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using Out4f = nb::ndarray<nb::numpy, float, nb::ndim<4>>;

// max(a, b), NaN if either is NaN, b on ties (numpy's maximum: the sign of a zero maximum agrees)
inline float max_nan(float a, float b) {
    return a != a ? a : (a > b ? a : b);
}

struct Geometry {
    int64_t kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left, h, w;
    int64_t row_len() const { return (ow - 1) * sw + (kw - 1) * dw + 1; }  // padded columns read
    // floats per padded row: pad_left -inf, the row, then -inf up to what the windows (and the
    // last 16-float vector load) read
    int64_t len = std::max(row_len(), pad_left + w) + 16;
};

// Per output row, how many of its window's rows lie in the input (count) and which
// (first[i * kh + a] for a < count[i]): the same for every plane
struct WindowRows {
    std::vector<int64_t> count, first;
    explicit WindowRows(const Geometry &g) : count(g.oh), first(g.oh * g.kh) {
        for (int64_t i = 0; i < g.oh; ++i)
            for (int64_t a = 0; a < g.kh; ++a) {
                const int64_t r = i * g.sh + a * g.dh - g.pad_top;
                if (r >= 0 && r < g.h) first[i * g.kh + count[i]++] = r;
            }
    }
};

// v[j] = max_a rows[a][j] for j < w (rows: the n >= 1 input rows of one output row's windows)
void vmax_scalar(const float *const *rows, int64_t n, float *v, int64_t w, int64_t from) {
    for (int64_t j = from; j < w; ++j) {
        float m = rows[0][j];
        for (int64_t a = 1; a < n; ++a) m = max_nan(m, rows[a][j]);
        v[j] = m;
    }
}

// y[j] = max_b vrow[j*sw + b*dw] for j < ow (vrow: a padded row of row_len() + 16 floats)
void hmax_scalar(const float *vrow, float *y, const Geometry &g, int64_t from) {
    for (int64_t j = from; j < g.ow; ++j) {
        float m = vrow[j * g.sw];
        for (int64_t b = 1; b < g.kw; ++b) m = max_nan(m, vrow[j * g.sw + b * g.dw]);
        y[j] = m;
    }
}

#if ONNX_LIGHT_AVX512
// max_nan of 8 lanes: maxps gives its second operand on ties and where either is NaN
AVX2 inline __m256 max_nan8(__m256 a, __m256 b) {
    const __m256 m = _mm256_max_ps(a, b);  // b where either is NaN
    return _mm256_blendv_ps(m, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}

// the even elements of p[0..15] as p[0, 2, 8, 10 | 4, 6, 12, 14] (in_order sorts them): every
// tap of a stride-2 window is shuffled alike, so the maximum runs in this order, sorted once
AVX2 inline __m256 evens_shuffled(const float *p) {
    return _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), _MM_SHUFFLE(2, 0, 2, 0));
}

AVX2 inline __m256 in_order(__m256 s) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), _MM_SHUFFLE(3, 1, 2, 0)));
}

// the whole row: the last w % 8 columns by masked loads, stored through a local block (no
// reads past the row, and no data-dependent branches of a scalar NaN-aware maximum)
AVX2 int64_t vmax_avx2(const float *const *rows, int64_t n, float *v, int64_t w) {
    int64_t j = 0;
    for (; j + 8 <= w; j += 8) {
        __m256 m = _mm256_loadu_ps(rows[0] + j);
        for (int64_t a = 1; a < n; ++a) m = max_nan8(m, _mm256_loadu_ps(rows[a] + j));
        _mm256_storeu_ps(v + j, m);
    }
    if (j == w) return w;
    const int64_t tail = w - j;
    // masked loads (a fault-free read of the row's last cells; masked stores are the slow kind)
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(tail)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 m = _mm256_maskload_ps(rows[0] + j, mask);
    for (int64_t a = 1; a < n; ++a) m = max_nan8(m, _mm256_maskload_ps(rows[a] + j, mask));
    alignas(32) float block[8];
    _mm256_store_ps(block, m);
    for (int64_t k = 0; k < tail; ++k) v[j + k] = block[k];
    return w;
}

AVX2 inline void store_upto(float *y, __m256 m, int64_t count) {
    if (count >= 8) {
        _mm256_storeu_ps(y, m);
    } else {  // through a local block: masked stores are microcoded on some x86 cores (AMD)
        alignas(32) float block[8];
        _mm256_store_ps(block, m);
        for (int64_t k = 0; k < count; ++k) y[k] = block[k];
    }
}

// column strides 1 and 2, whole vectors (vrow has 16 floats beyond what the windows read)
AVX2 int64_t hmax_avx2(const float *vrow, float *y, const Geometry &g) {
    if (g.sw == 1) {
        for (int64_t j = 0; j < g.ow; j += 8) {
            __m256 m = _mm256_loadu_ps(vrow + j);
            for (int64_t b = 1; b < g.kw; ++b) m = max_nan8(m, _mm256_loadu_ps(vrow + j + b * g.dw));
            store_upto(y + j, m, g.ow - j);
        }
        return g.ow;
    }
    if (g.sw == 2) {
        for (int64_t j = 0; j < g.ow; j += 8) {
            __m256 m = evens_shuffled(vrow + 2 * j);
            for (int64_t b = 1; b < g.kw; ++b) m = max_nan8(m, evens_shuffled(vrow + 2 * j + b * g.dw));
            store_upto(y + j, in_order(m), g.ow - j);
        }
        return g.ow;
    }
    return 0;
}
#endif

// `planes` consecutive (n, c) planes, rows first, in two phases: the maximum of each output
// row's window rows (rows outside the input skipped) into its row of `vplane` (rows of g.len
// floats) at pad_left, the borders staying -inf; then each output row from the maximum over
// its windows' columns of that row. The phases are apart (and small planes go several at a
// time) so that the column pass's unaligned loads never wait on the row pass's stores still
// in flight (a load spanning two pending stores cannot be forwarded: storing a row and
// reading it back at once cost 3x). empty: the output columns
// whose windows hold no input column, and rows: the window rows of every output row (their
// outputs are the lowest float, as onnxruntime gives a window with no input cell).
void pool_planes(const float *x, float *y, int64_t planes, const Geometry &g, float *vplane,
                 const WindowRows &rows, const std::vector<int64_t> &empty, bool simd) {
    const float lowest = std::numeric_limits<float>::lowest();
    const float *ptrs[64];  // the window rows of one output row (on the heap past 64)
    std::vector<const float *> many(g.kh > 64 ? static_cast<size_t>(g.kh) : 0);
    const float **row_ptrs = g.kh > 64 ? many.data() : ptrs;
    for (int64_t q = 0; q < planes * g.oh; ++q) {
        const int64_t i = q % g.oh, n = rows.count[i];
        const float *plane = x + (q / g.oh) * g.h * g.w;
        for (int64_t a = 0; a < n; ++a) row_ptrs[a] = plane + rows.first[i * g.kh + a] * g.w;
        if (n == 0) continue;
        float *v = vplane + q * g.len + g.pad_left;
        int64_t done = 0;
#if ONNX_LIGHT_AVX512
        if (simd) done = vmax_avx2(row_ptrs, n, v, g.w);
#endif
        vmax_scalar(row_ptrs, n, v, g.w, done);
    }
    for (int64_t q = 0; q < planes * g.oh; ++q) {
        const int64_t i = q % g.oh;
        float *yrow = y + q * g.ow;
        if (rows.count[i] == 0) {
            std::fill(yrow, yrow + g.ow, lowest);
            continue;
        }
        const float *vrow = vplane + q * g.len;
        int64_t done = 0;
#if ONNX_LIGHT_AVX512
        if (simd) done = hmax_avx2(vrow, yrow, g);
#endif
        hmax_scalar(vrow, yrow, g, done);
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
    const Geometry g{kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left, int64_t(x.shape(2)), int64_t(x.shape(3))};
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
        const WindowRows rows(g);
        // the pool's items: runs of `per` planes, about 4k floats of padded rows (or one plane)
        const int64_t planes = n * c, per = std::clamp<int64_t>(4096 / std::max<int64_t>(g.oh * g.len, 1), 1, 16);
        const int64_t items = (planes + per - 1) / per;
        threads = static_cast<int>(std::min<int64_t>(threads, items));
        // the padded rows of one item per worker (-inf borders, written once)
        std::vector<std::vector<float>> vplanes(
            threads, std::vector<float>(per * g.oh * g.len, -std::numeric_limits<float>::infinity()));
        const bool simd = has_avx2_fma();
        const float *xs = x.data();
        onnx_light_pool::parallel_items(threads, items, [&](int worker, int64_t item) {
            const int64_t p = item * per, count = std::min(per, planes - p);
            pool_planes(xs + p * g.h * g.w, y + p * oh * ow, count, g, vplanes[worker].data(), rows, empty, simd);
        });
    }
    if (lent_out) return nb::borrow(out);
    nb::capsule owner(y, [](void *ptr) noexcept { delete[] static_cast<float *>(ptr); });
    fresh.release();
    return nb::cast(Out4f(y, {size_t(n), size_t(c), size_t(oh), size_t(ow)}, owner));
}


using In2f = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Out1f = nb::ndarray<float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// y[p] = sum(x[p, :]) / cells, x (planes, cells), y (planes,) written in place
void mean_rows_f32(In2f x, Out1f y) {
    const int64_t planes = x.shape(0), cells = x.shape(1);
    if (static_cast<int64_t>(y.shape(0)) != planes)
        throw std::invalid_argument("mean_rows_f32: y must hold one value per row of x");
    const float *xs = x.data();
    float *ys = y.data();
    const float count = static_cast<float>(cells);
    nb::gil_scoped_release release;
    for (int64_t p = 0; p < planes; ++p) ys[p] = pairwise_sum(xs + p * cells, cells) / count;
}

template <typename T>
using Flat = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename T>
void scatter_add_flat(Flat<T> y, Flat<const int64_t> index, Flat<const T> u) {
    const int64_t n = static_cast<int64_t>(y.shape(0)), count = static_cast<int64_t>(index.shape(0));
    if (static_cast<int64_t>(u.shape(0)) != count)
        throw std::invalid_argument("scatter_add_flat: index and updates must have the same length");
    const int64_t *is = index.data();
    for (int64_t i = 0; i < count; ++i)
        if (is[i] < -n || is[i] >= n)
            throw std::out_of_range("scatter_add_flat: index " + std::to_string(is[i]) + " is out of range for " +
                                    std::to_string(n) + " elements");
    T *ys = y.data();
    const T *us = u.data();
    nb::gil_scoped_release release;
    for (int64_t i = 0; i < count; ++i) ys[is[i] < 0 ? is[i] + n : is[i]] += us[i];
}

}  // namespace

void bind_pool(nb::module_ &m) {
    m.def("max_pool2d_f32", &max_pool2d_f32, nb::arg("x"), nb::arg("kh"), nb::arg("kw"), nb::arg("sh"), nb::arg("sw"),
          nb::arg("dh"), nb::arg("dw"), nb::arg("oh"), nb::arg("ow"), nb::arg("pad_top"), nb::arg("pad_left"),
          nb::arg("threads") = 1, nb::arg("out").none() = nb::none());
    m.def("mean_rows_f32", &mean_rows_f32, nb::arg("x"), nb::arg("y"));
    m.def("scatter_add_flat", &scatter_add_flat<float>, nb::arg("y"), nb::arg("index"), nb::arg("u"));
    m.def("scatter_add_flat", &scatter_add_flat<double>, nb::arg("y"), nb::arg("index"), nb::arg("u"));
}
