// onnx_light._native: the loops numpy does poorly (DESIGN.md section 6).
// Each function has a pure-Python twin with the same signature (pooling:
// onnx_light/runtime/_native.py; codec, src/codec.cpp: onnx_light/onnx_core/_wire.py);
// ONNX_LIGHT_PURE_PYTHON=1 selects the twins.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "simd.h"

namespace nb = nanobind;

void bind_codec(nb::module_ &m);  // src/codec.cpp: the wire codec's byte loops
void bind_conv(nb::module_ &m);   // src/conv.cpp: 2-D float32 convolution
void bind_conv_backward(nb::module_ &m);  // src/conv_backward.cpp: ConvTranspose weights as a Conv's
void bind_recurrent(nb::module_ &m);  // src/recurrent.cpp: the RNN/GRU/LSTM step loop
void bind_resample(nb::module_ &m);  // src/resample.cpp: Resize / GridSample weighted gathers
void bind_pool(nb::module_ &m);  // src/pool.cpp: separable float32 max pooling
void bind_elementwise(nb::module_ &m);  // src/elementwise.cpp: Sigmoid, Softmax rows (float32)
void bind_thread_pool(nb::module_ &m);  // src/thread_pool.cpp: the persistent helper threads
void bind_squeeze_excite(nb::module_ &m);  // src/squeeze_excite.cpp: a squeeze-excite block in one call
void bind_transpose(nb::module_ &m);  // src/transpose.cpp: a blocked copy of a transposed view

namespace {

template <typename T>
using In4 = nb::ndarray<const T, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
template <typename T>
using Out4 = nb::ndarray<nb::numpy, T, nb::ndim<4>>;
template <typename T>
using Lent4 = nb::ndarray<T, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

// A range [first, last) of one axis: the taps that read the input (not a pad) for an output
// position (inside_taps), or the outputs whose windows lie inside the input (inside_outputs).
struct Taps {
    int64_t first, last;
};

// The indexed loop of max_pool2d for windows that all lie inside the input: per output, the
// running maximum and its tap in registers, branch-free selects (a compare-and-branch per tap
// mispredicts on ReLU outputs, and the running index spilled to the stack: 12 vs 3 ms on
// 16x32x62x62, 2x2 stride 2). KH, KW > 0 fix the window at compile time (the 2x2 pool,
// unrolled), 0 takes kh, kw.
template <typename T, int64_t KH = 0, int64_t KW = 0>
void max_pool2d_indexed(const T *x, T *y, int64_t *idx, int64_t planes, int64_t hp, int64_t wp, int64_t kh_,
                        int64_t kw_, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t oh, int64_t ow,
                        int64_t pad_top, int64_t pad_left, int64_t height, int64_t width, int64_t storage_order,
                        int64_t first_col = 0) {
    const int64_t kh = KH ? KH : kh_, kw = KW ? KW : kw_;
    // the flat index of tap (a, b) in output (i, j)'s window: base(i, j) + a * row_step + b * col_step
    const int64_t row_step = storage_order ? dh : dh * width, col_step = storage_order ? dw * height : dw;
    for (int64_t p = 0; p < planes; ++p) {
        const T *plane = x + p * hp * wp;
        for (int64_t i = 0; i < oh; ++i) {
            T *yrow = y + (p * oh + i) * ow;
            int64_t *irow = idx + (p * oh + i) * ow;
            const T *src = plane + i * sh * wp;
            for (int64_t j = first_col; j < ow; ++j) {
                const T *win = src + j * sw;
                T best = win[0];
                int64_t at = 0;  // a * row_step + b * col_step of the maximum
                for (int64_t a = 0; a < kh; ++a) {
                    for (int64_t b = a == 0 ? 1 : 0; b < kw; ++b) {
                        const T v = win[a * dh * wp + b * dw];
                        const int64_t gt = -static_cast<int64_t>(v > best);
                        at ^= (at ^ (a * row_step + b * col_step)) & gt;
                        const T m = v > best ? v : best;
                        best = v != v ? v : m;  // a NaN wins; the index stays the last larger number's
                    }
                }
                const int64_t r = i * sh - pad_top, q = j * sw - pad_left;
                yrow[j] = best;
                irow[j] = p * height * width + (storage_order ? q * height + r : r * width + q) + at;
            }
        }
    }
}

#if ONNX_LIGHT_AVX512
// The indexed 2x2 stride-2 float32 pool (a CNN's MaxPool before its gradient), 8 outputs per
// step: the row pair's 16 + 16 inputs split into even and odd columns (the four taps), then
// max_pool2d_indexed's selects lane by lane in its tap order: a larger tap takes the maximum
// and its offset, a NaN tap the maximum only. 0.6 vs 2.5 ms on 16x32x62x62 (the conv net's pool,
// into lent buffers) when the last ow % 8 columns went one by one.
AVX2 inline void split_even_odd(const float *src, __m256 &even, __m256 &odd) {
    const __m256 a = _mm256_loadu_ps(src), b = _mm256_loadu_ps(src + 8);
    // within lanes a0 a2 b0 b2 | a4 a6 b4 b6, then the 64-bit pairs in order 0 2 1 3
    even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

AVX2 inline void take_tap(__m256 v, __m256i offset, __m256 &best, __m256i &at) {
    const __m256 gt = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
    at = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(at), _mm256_castsi256_ps(offset), gt));
    best = _mm256_blendv_ps(_mm256_blendv_ps(best, v, gt), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

// every output of every plane: 8 columns at a time, the last 8 ending at ow (overlapping the
// ones before when 8 does not divide ow: they are written again with the same values)
AVX2 void max_pool2x2s2_rows_avx2(const float *x, float *y, int64_t *idx, int64_t planes, int64_t hp, int64_t wp,
                                  int64_t oh, int64_t ow, int64_t height, int64_t width, int64_t storage_order) {
    const int64_t row_step = storage_order ? 1 : width, col_step = storage_order ? height : 1;
    const __m256i off01 = _mm256_set1_epi32(static_cast<int32_t>(col_step));
    const __m256i off10 = _mm256_set1_epi32(static_cast<int32_t>(row_step));
    const __m256i off11 = _mm256_set1_epi32(static_cast<int32_t>(row_step + col_step));
    // lane k's first column 2 (j + k): its part of the flat index
    const __m256i lanes_lo = _mm256_setr_epi64x(0, 2 * col_step, 4 * col_step, 6 * col_step);
    const __m256i lanes_hi = _mm256_add_epi64(lanes_lo, _mm256_set1_epi64x(8 * col_step));
    for (int64_t p = 0; p < planes; ++p) {
        const float *plane = x + p * hp * wp;
        for (int64_t i = 0; i < oh; ++i) {
            const float *r0 = plane + 2 * i * wp, *r1 = r0 + wp;
            float *yrow = y + (p * oh + i) * ow;
            int64_t *irow = idx + (p * oh + i) * ow;
            for (int64_t j0 = 0; j0 < ow; j0 += 8) {
                const int64_t j = std::min(j0, ow - 8);
                __m256 t00, t01, t10, t11;
                split_even_odd(r0 + 2 * j, t00, t01);
                split_even_odd(r1 + 2 * j, t10, t11);
                __m256 best = t00;
                __m256i at = _mm256_setzero_si256();
                take_tap(t01, off01, best, at);
                take_tap(t10, off10, best, at);
                take_tap(t11, off11, best, at);
                _mm256_storeu_ps(yrow + j, best);
                const __m256i b = _mm256_set1_epi64x(p * height * width + 2 * i * row_step + 2 * j * col_step);
                const __m256i lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(at));
                const __m256i hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(at, 1));
                _mm256_storeu_si256(reinterpret_cast<__m256i *>(irow + j), _mm256_add_epi64(_mm256_add_epi64(b, lanes_lo), lo));
                _mm256_storeu_si256(reinterpret_cast<__m256i *>(irow + j + 4), _mm256_add_epi64(_mm256_add_epi64(b, lanes_hi), hi));
            }
        }
    }
}

// The indexed float32 pool with column stride 2 (no column dilation) over the output rectangle
// rows [i0, i1) x columns [j0, j1), whose windows all lie inside the input (ResNet's 3x3/2 stem
// pool away from its padded border), 8 outputs per step: per kernel row, each pair of taps
// (b, b + 1) for even b is the even / odd split of the 16 inputs from column 2j + b, taken in
// kernel order by take_tap as max_pool2d_indexed's selects do. A step whose loads would pass the
// padded row's end, and the columns left after the last step, go through the scalar selects.
// 3x3/2 on 64x112x112 with pads 1: 0.6 vs 4.2 ms (the scalar padded loop).
AVX2 void max_pool_s2_block_avx2(const float *x, float *y, int64_t *idx, int64_t planes, int64_t hp, int64_t wp,
                                 int64_t kh, int64_t kw, int64_t sh, int64_t dh, int64_t oh, int64_t ow, int64_t i0,
                                 int64_t i1, int64_t j0, int64_t j1, int64_t pad_top, int64_t pad_left, int64_t height,
                                 int64_t width, int64_t storage_order) {
    const int64_t row_step = storage_order ? 1 : width, col_step = storage_order ? height : 1;
    const int64_t tap_row = dh * row_step;  // the flat step of one kernel row
    const int64_t last_load = ((kw - 1) & ~int64_t(1)) + 15;  // the last column read past 2j
    const __m256i lanes_lo = _mm256_setr_epi64x(0, 2 * col_step, 4 * col_step, 6 * col_step);
    const __m256i lanes_hi = _mm256_add_epi64(lanes_lo, _mm256_set1_epi64x(8 * col_step));
    for (int64_t p = 0; p < planes; ++p) {
        const float *plane = x + p * hp * wp;
        for (int64_t i = i0; i < i1; ++i) {
            float *yrow = y + (p * oh + i) * ow;
            int64_t *irow = idx + (p * oh + i) * ow;
            const int64_t r = i * sh - pad_top;  // the window's first input row
            int64_t j = j0;
            for (; j + 8 <= j1 && 2 * j + last_load < wp; j += 8) {
                __m256 best = _mm256_setzero_ps();
                __m256i at = _mm256_setzero_si256();
                for (int64_t a = 0; a < kh; ++a) {
                    const float *src = plane + (i * sh + a * dh) * wp + 2 * j;
                    for (int64_t b = 0; b < kw; b += 2) {
                        __m256 even, odd;
                        split_even_odd(src + b, even, odd);
                        if (a == 0 && b == 0) {
                            best = even;
                        } else {
                            take_tap(even, _mm256_set1_epi32(static_cast<int32_t>(a * tap_row + b * col_step)), best, at);
                        }
                        if (b + 1 < kw)
                            take_tap(odd, _mm256_set1_epi32(static_cast<int32_t>(a * tap_row + (b + 1) * col_step)), best,
                                     at);
                    }
                }
                _mm256_storeu_ps(yrow + j, best);
                const __m256i base = _mm256_set1_epi64x(p * height * width + r * row_step + (2 * j - pad_left) * col_step);
                const __m256i lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(at));
                const __m256i hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(at, 1));
                _mm256_storeu_si256(reinterpret_cast<__m256i *>(irow + j), _mm256_add_epi64(_mm256_add_epi64(base, lanes_lo), lo));
                _mm256_storeu_si256(reinterpret_cast<__m256i *>(irow + j + 4),
                                    _mm256_add_epi64(_mm256_add_epi64(base, lanes_hi), hi));
            }
            for (; j < j1; ++j) {  // max_pool2d_indexed's scalar selects
                const float *win = plane + i * sh * wp + 2 * j;
                float best = win[0];
                int64_t at = 0;
                for (int64_t a = 0; a < kh; ++a) {
                    for (int64_t b = a == 0 ? 1 : 0; b < kw; ++b) {
                        const float v = win[a * dh * wp + b];
                        const int64_t gt = -static_cast<int64_t>(v > best);
                        at ^= (at ^ (a * tap_row + b * col_step)) & gt;
                        const float m = v > best ? v : best;
                        best = v != v ? v : m;
                    }
                }
                yrow[j] = best;
                irow[j] = p * height * width + r * row_step + (2 * j - pad_left) * col_step + at;
            }
        }
    }
}
#endif

// Whether max_pool_s2_block_avx2 takes an indexed pool: float32, column stride 2 without column
// dilation, a window other than 2x2 (pool2x2s2_vector's), AVX2 at run time.
template <typename T>
bool pool_s2_vector(const int64_t *idx, int64_t kh, int64_t kw, int64_t sw, int64_t dw) {
#if ONNX_LIGHT_AVX512
    if constexpr (std::is_same_v<T, float>)
        return idx && sw == 2 && dw == 1 && !(kh == 2 && kw == 2) && has_avx2_fma();
#endif
    (void)idx, (void)kh, (void)kw, (void)sw, (void)dw;
    return false;
}

template <typename T>
void max_pool_s2_block(const T *x, T *y, int64_t *idx, int64_t planes, int64_t hp, int64_t wp, int64_t kh, int64_t kw,
                       int64_t sh, int64_t dh, int64_t oh, int64_t ow, Taps rows, Taps cols, int64_t pad_top,
                       int64_t pad_left, int64_t height, int64_t width, int64_t storage_order) {
#if ONNX_LIGHT_AVX512
    if constexpr (std::is_same_v<T, float>) {
        max_pool_s2_block_avx2(x, y, idx, planes, hp, wp, kh, kw, sh, dh, oh, ow, rows.first, rows.last, cols.first,
                               cols.last, pad_top, pad_left, height, width, storage_order);
        return;
    }
#endif
    (void)x, (void)y, (void)idx, (void)planes, (void)hp, (void)wp, (void)kh, (void)kw, (void)sh, (void)dh, (void)oh;
    (void)ow, (void)rows, (void)cols, (void)pad_top, (void)pad_left, (void)height, (void)width, (void)storage_order;
}

// The columns [0, done) of a 2x2 stride-2 indexed pool written by the vector loop: all of them
// when it applies (float32, no dilation, at least 8 columns, AVX2), else none (max_pool2d_indexed
// then does the columns from done on).
template <typename T>
int64_t pool2x2s2_vector(const T *x, T *y, int64_t *idx, int64_t planes, int64_t hp, int64_t wp, int64_t sh,
                         int64_t sw, int64_t dh, int64_t dw, int64_t oh, int64_t ow, int64_t height, int64_t width,
                         int64_t storage_order) {
#if ONNX_LIGHT_AVX512
    if constexpr (std::is_same_v<T, float>) {
        if (sh == 2 && sw == 2 && dh == 1 && dw == 1 && ow >= 8 && has_avx2_fma()) {
            max_pool2x2s2_rows_avx2(x, y, idx, planes, hp, wp, oh, ow, height, width, storage_order);
            return ow;
        }
    }
#endif
    (void)x, (void)y, (void)idx, (void)planes, (void)hp, (void)wp, (void)sh, (void)sw, (void)dh, (void)dw, (void)oh;
    (void)ow, (void)height, (void)width, (void)storage_order;
    return 0;
}


std::vector<Taps> inside_taps(int64_t outs, int64_t s, int64_t d, int64_t k, int64_t pad, int64_t size) {
    std::vector<Taps> taps(static_cast<size_t>(outs));
    for (int64_t o = 0; o < outs; ++o) {
        const int64_t at = o * s - pad;  // the input position of tap 0
        const int64_t first = at >= 0 ? 0 : (-at + d - 1) / d;
        const int64_t last = at >= size ? 0 : std::min(k, (size - at + d - 1) / d);
        taps[static_cast<size_t>(o)] = {first, std::max(first, last)};
    }
    return taps;
}

// The outputs [first, last) of one axis whose windows lie inside the input (read no pad).
Taps inside_outputs(int64_t outs, int64_t s, int64_t d, int64_t k, int64_t pad, int64_t size) {
    const int64_t first = std::min((pad + s - 1) / s, outs);
    const int64_t span = size - 1 + pad - (k - 1) * d;  // the last window start inside, times s
    const int64_t last = span < 0 ? 0 : std::min(span / s + 1, outs);
    return {first, std::max(first, last)};
}

// The loop of max_pool2d when some window reads the padding: only the taps inside the input
// count (the first maximum among them, in kernel order, as onnxruntime: a window whose cells
// all equal the pad value reports its first cell, never a pad); a window with no cell inside
// gives the type's lowest value and index -(width + 1) (column-major: -(height + 1)) plus the
// plane offset, as onnxruntime does. xp is the input padded by pad_top / pad_left (and at least
// as far as the windows reach on the other sides); idx may be null (no indices).
// Outputs in rows [skip.first, skip.last) and columns [skip_cols.first, skip_cols.last) are left
// alone (a vector loop wrote them).
template <typename T>
void max_pool2d_padded(const T *x, T *y, int64_t *idx, int64_t planes, int64_t hp, int64_t wp, int64_t kh,
                       int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t oh, int64_t ow,
                       int64_t pad_top, int64_t pad_left, int64_t height, int64_t width, int64_t storage_order,
                       Taps skip = {0, 0}, Taps skip_cols = {0, 0}) {
    const std::vector<Taps> rows = inside_taps(oh, sh, dh, kh, pad_top, height);
    const std::vector<Taps> cols = inside_taps(ow, sw, dw, kw, pad_left, width);
    const int64_t row_step = storage_order ? 1 : width, col_step = storage_order ? height : 1;
    const int64_t none = storage_order ? -(height + 1) : -(width + 1);
    for (int64_t p = 0; p < planes; ++p) {
        const T *plane = x + p * hp * wp;
        for (int64_t i = 0; i < oh; ++i) {
            T *yrow = y + (p * oh + i) * ow;
            int64_t *irow = idx ? idx + (p * oh + i) * ow : nullptr;
            const Taps ra = rows[static_cast<size_t>(i)];
            const bool skipping = i >= skip.first && i < skip.last;
            for (int64_t j = 0; j < ow; ++j) {
                if (skipping && j >= skip_cols.first && j < skip_cols.last) {
                    j = skip_cols.last - 1;
                    continue;
                }
                const Taps cb = cols[static_cast<size_t>(j)];
                if (ra.first == ra.last || cb.first == cb.last) {
                    yrow[j] = std::numeric_limits<T>::lowest();
                    if (irow) irow[j] = p * height * width + none;
                    continue;
                }
                // (r, q): input position of the maximum
                int64_t r = i * sh + ra.first * dh - pad_top, q = j * sw + cb.first * dw - pad_left;
                T best = plane[(r + pad_top) * wp + q + pad_left];
                int64_t at = r * row_step + q * col_step;
                for (int64_t a = ra.first; a < ra.last; ++a) {
                    const int64_t rr = i * sh + a * dh - pad_top;
                    const T *row = plane + (rr + pad_top) * wp + pad_left;
                    for (int64_t b = a == ra.first ? cb.first + 1 : cb.first; b < cb.last; ++b) {
                        const int64_t qq = j * sw + b * dw - pad_left;
                        const T v = row[qq];
                        const int64_t gt = -static_cast<int64_t>(v > best);
                        at ^= (at ^ (rr * row_step + qq * col_step)) & gt;
                        const T m = v > best ? v : best;
                        best = v != v ? v : m;
                    }
                }
                yrow[j] = best;
                if (irow) irow[j] = p * height * width + at;
            }
        }
    }
}

// per output row: one pass per kernel tap over contiguous input rows (every window inside),
// so the inner loop streams memory and keeps the running max in the output row
template <typename T>
void max_pool2d_plain(const T *x, T *y, int64_t planes, int64_t hp, int64_t wp, int64_t kh, int64_t kw, int64_t sh,
                      int64_t sw, int64_t dh, int64_t dw, int64_t oh, int64_t ow) {
    for (int64_t p = 0; p < planes; ++p) {
        const T *plane = x + p * hp * wp;
        for (int64_t i = 0; i < oh; ++i) {
            T *yrow = y + (p * oh + i) * ow;
            for (int64_t a = 0; a < kh; ++a) {
                const T *src = plane + (i * sh + a * dh) * wp;
                for (int64_t b = 0; b < kw; ++b) {
                    const T *tap = src + b * dw;
                    if (a == 0 && b == 0) {
                        for (int64_t j = 0; j < ow; ++j) yrow[j] = tap[j * sw];
                        continue;
                    }
                    // branch-free: the max, then NaN wins
                    for (int64_t j = 0; j < ow; ++j) {
                        const T v = tap[j * sw], y0 = yrow[j];
                        const T m = v > y0 ? v : y0;
                        yrow[j] = v != v ? v : m;
                    }
                }
            }
        }
    }
}

// `lent` when `out` is a writeable C-contiguous array of T and exactly `shape` that does not
// overlap [lo, hi) (the pool's buffer: written and returned as it is); else false (allocate)
template <typename U>
bool takes_out(nb::handle out, const size_t *shape, Lent4<U> &lent, const void *lo, const void *hi) {
    if (!out.is_valid() || out.is_none() || !nb::try_cast(out, lent, false)) return false;
    for (int k = 0; k < 4; ++k)
        if (lent.shape(k) != shape[k]) return false;
    const auto *a = reinterpret_cast<const char *>(lent.data());
    const auto *e = a + lent.size() * sizeof(U);
    return !(a < static_cast<const char *>(hi) && static_cast<const char *>(lo) < e) || lent.size() == 0;
}

// 2-D max pooling of an NCHW input padded by pad_top / pad_left (and far enough after) into xp.
// Only the input's cells count (never a pad): a NaN in a window makes its maximum NaN (as
// numpy's maximum), the index staying that of the largest number before it; ties keep the first
// maximum in kernel order; a window with no input cell: see max_pool2d_padded (onnxruntime's
// answers). idx holds the flat index of the maximum inside the unpadded (n, c) plane, row-major
// (storage_order 0) or column-major (1), plus the plane offset, as MaxPool's Indices output
// defines it. `out` / `indices_out` (the buffer pool's arrays): used and returned when they are
// writeable C-contiguous arrays of the result's dtype and shape that do not overlap xp, else
// ignored (new arrays).
template <typename T>
nb::tuple max_pool2d(In4<T> xp, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                     int64_t oh, int64_t ow, int64_t pad_top, int64_t pad_left, int64_t height, int64_t width,
                     int64_t storage_order, bool want_indices, nb::handle out, nb::handle indices_out) {
    const int64_t n = xp.shape(0), c = xp.shape(1), hp = xp.shape(2), wp = xp.shape(3);
    if (kh <= 0 || kw <= 0 || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0 || oh < 0 || ow < 0)
        throw std::invalid_argument("max_pool2d: kernel, strides, dilations must be positive");
    if (pad_top < 0 || pad_left < 0 || height < 0 || width < 0 || pad_top + height > hp || pad_left + width > wp)
        throw std::invalid_argument("max_pool2d: the input does not fit in the padded array");
    if (oh > 0 && (oh - 1) * sh + (kh - 1) * dh >= hp) throw std::invalid_argument("max_pool2d: window past input");
    if (ow > 0 && (ow - 1) * sw + (kw - 1) * dw >= wp) throw std::invalid_argument("max_pool2d: window past input");
    const size_t shape[4] = {static_cast<size_t>(n), static_cast<size_t>(c), static_cast<size_t>(oh),
                             static_cast<size_t>(ow)};
    const size_t out_size = static_cast<size_t>(n * c * oh * ow);
    const T *x = xp.data();
    const void *lo = x, *hi = x + xp.size();
    Lent4<T> y_lent;
    Lent4<int64_t> i_lent;
    const bool y_in = takes_out(out, shape, y_lent, lo, hi);
    const bool i_in = want_indices && takes_out(indices_out, shape, i_lent, lo, hi);
    std::unique_ptr<T[]> y_new(y_in ? nullptr : new T[out_size ? out_size : 1]);
    std::unique_ptr<int64_t[]> i_new(want_indices && !i_in ? new int64_t[out_size ? out_size : 1] : nullptr);
    T *y = y_in ? y_lent.data() : y_new.get();
    int64_t *idx = !want_indices ? nullptr : i_in ? i_lent.data() : i_new.get();
    // every window inside the input (no pad read): the fast loops
    const bool inside = pad_top == 0 && pad_left == 0 && (oh == 0 || (oh - 1) * sh + (kh - 1) * dh < height) &&
                        (ow == 0 || (ow - 1) * sw + (kw - 1) * dw < width);
    {
        nb::gil_scoped_release release;
        if (pool_s2_vector<T>(idx, kh, kw, sw, dw)) {
            // the windows inside the input 8 at a time, then the border (if any) as below
            const Taps rows = inside_outputs(oh, sh, dh, kh, pad_top, height);
            const Taps cols = inside_outputs(ow, sw, dw, kw, pad_left, width);
            max_pool_s2_block(x, y, idx, n * c, hp, wp, kh, kw, sh, dh, oh, ow, rows, cols, pad_top, pad_left, height,
                              width, storage_order);
            if (rows.first > 0 || rows.last < oh || cols.first > 0 || cols.last < ow)
                max_pool2d_padded(x, y, idx, n * c, hp, wp, kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left, height,
                                  width, storage_order, rows, cols);
        } else if (!inside) {
            max_pool2d_padded(x, y, idx, n * c, hp, wp, kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left, height,
                              width, storage_order);
        } else if (idx && kh == 2 && kw == 2) {
            const int64_t done =
                pool2x2s2_vector(x, y, idx, n * c, hp, wp, sh, sw, dh, dw, oh, ow, height, width, storage_order);
            max_pool2d_indexed<T, 2, 2>(x, y, idx, n * c, hp, wp, kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left,
                                        height, width, storage_order, done);
        } else if (idx) {
            max_pool2d_indexed(x, y, idx, n * c, hp, wp, kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left, height,
                               width, storage_order);
        } else {
            max_pool2d_plain(x, y, n * c, hp, wp, kh, kw, sh, sw, dh, dw, oh, ow);
        }
    }
    nb::object y_arr;
    if (y_in) {
        y_arr = nb::borrow(out);
    } else {
        nb::capsule owner(y_new.get(), [](void *ptr) noexcept { delete[] static_cast<T *>(ptr); });
        y_arr = nb::cast(Out4<T>(y_new.release(), 4, shape, owner));
    }
    if (!want_indices) return nb::make_tuple(y_arr, nb::none());
    if (i_in) return nb::make_tuple(y_arr, nb::borrow(indices_out));
    nb::capsule owner(i_new.get(), [](void *ptr) noexcept { delete[] static_cast<int64_t *>(ptr); });
    return nb::make_tuple(y_arr, nb::cast(Out4<int64_t>(i_new.release(), 4, shape, owner)));
}

// MaxUnpool's flat scatter (a pool's gradient): out = 0, then out[idx[i]] = x[i] in order (a
// repeated index keeps the last value, as numpy's assignment); false, with out partly written,
// when an index is outside [0, out.size) (the caller raises). One pass instead of numpy's
// min, max, fill and fancy-index assignment (0.8 ms of them on 16x32x31x31).
bool max_unpool_f32(nb::ndarray<const float, nb::c_contig, nb::device::cpu> x,
                    nb::ndarray<const int64_t, nb::c_contig, nb::device::cpu> idx,
                    nb::ndarray<float, nb::c_contig, nb::device::cpu> out) {
    if (x.size() != idx.size()) throw std::invalid_argument("max_unpool_f32: x and idx differ in size");
    const int64_t n = static_cast<int64_t>(x.size()), size = static_cast<int64_t>(out.size());
    const float *src = x.data();
    const int64_t *at = idx.data();
    float *dst = out.data();
    nb::gil_scoped_release release;
    std::fill_n(dst, size, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t j = at[i];
        if (j < 0 || j >= size) return false;
        dst[j] = src[i];
    }
    return true;
}

template <typename T>
void def_max_pool2d(nb::module_ &m) {
    m.def("max_pool2d", &max_pool2d<T>, nb::arg("xp"), nb::arg("kh"), nb::arg("kw"), nb::arg("sh"), nb::arg("sw"),
          nb::arg("dh"), nb::arg("dw"), nb::arg("oh"), nb::arg("ow"), nb::arg("pad_top"), nb::arg("pad_left"),
          nb::arg("height"), nb::arg("width"), nb::arg("storage_order"), nb::arg("want_indices"),
          nb::arg("out").none() = nb::none(), nb::arg("indices_out").none() = nb::none());
}

}  // namespace

NB_MODULE(_native, m) {
    m.doc() = "onnx-light's native loops; every function has a pure-Python twin";
    def_max_pool2d<float>(m);
    def_max_pool2d<double>(m);
    def_max_pool2d<int8_t>(m);
    def_max_pool2d<uint8_t>(m);
    m.def("max_unpool_f32", &max_unpool_f32, nb::arg("x"), nb::arg("idx"), nb::arg("out"));
    bind_codec(m);
    bind_conv(m);
    bind_conv_backward(m);
    bind_recurrent(m);
    bind_resample(m);
    bind_pool(m);
    bind_elementwise(m);
    bind_thread_pool(m);
    bind_squeeze_excite(m);
    bind_transpose(m);
}
