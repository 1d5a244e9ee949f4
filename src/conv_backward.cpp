// The loops of a convolution's backward that numpy does poorly (float32).
//
// conv_transpose_weights: a transposed convolution of stride 1 is the convolution of its input
// with its weights (C, M/g, kh, kw) flipped along both spatial axes and with the two channel
// axes swapped per group, (M, C/g, kh, kw):
//     flipped[g*Mg + m, c, a, b] = w[g*Cg + c, m, kh-1-a, kw-1-b]
// (reversing both spatial axes reverses the kh*kw taps read as one flat run). numpy's copy of
// that transposed view walks the destination in order and reads 9 floats from each source row
// it jumps to (7-15 ms for 512 x 512 x 3 x 3, as long as the convolution itself); here both the
// reads and the writes go in blocks of 16 x 16 channel pairs, runs of 16 * kh * kw floats on
// both sides (~1 ms). The pure-Python twin is conv_transpose_weights_twin in
// onnx_light/runtime/kernels/_conv_backward.py.
//
// depthwise_conv_transpose: the data gradient of a depthwise Conv (one input and one output
// channel per group), a ConvTranspose with weights (C, 1, kh, kw), directly: output cell t
// (after the begin crop) of an axis gathers x[(t + begin - k*d) / s] w[k] over the taps k
// that divide; split by output phase r = t mod s, those taps and their offsets are fixed, so
// each phase is a stride-1 correlation of a zero-bordered copy of the plane (no zeros
// multiplied, no dilated input, no flipped weights).
// The twin is depthwise_conv_transpose_twin in _conv_backward.py.
//
// col2im_f32: the fold of a ConvTranspose's GEMM columns into its output. cols (P, kh*kw, ih*iw)
// holds per plane p (sample, output channel) and tap (a, b) the product for every input cell
// (i, j); output cell (i*sh + a*dh - top, j*sw + b*dw - left) of plane p adds it, cells outside
// (oh, ow) are dropped. Every output cell sums its taps in kernel order starting from zero, as
// the twin's one slice-add per tap does (col2im_f32_twin in _conv_backward.py): bitwise equal.
// With the GEMM W^T X before it this is a ConvTranspose without flipping the weights (a copy of
// all of them per call, the cost of the deep layers whose weights outweigh their maps).
//
// im2col_f32: the columns of a Conv's weight gradient, y[n, c*K + a*kw + b, i, j] =
// x[n, c, i*sh + a*dh - top, j*sw + b*dw - left] (0 outside x), K = kh*kw: the one-hot grouped
// Conv the rule emits (onnx_light/runtime/kernels/_one_hot_conv.py, whose strided-view copy is
// the twin) as row copies, without a padded copy of x.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "simd.h"

namespace nb = nanobind;

namespace onnx_light_conv_backward {
namespace {

using In4 = nb::ndarray<const float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using Out4 = nb::ndarray<nb::numpy, float, nb::ndim<4>>;

constexpr int64_t BLOCK = 16;  // channel pairs per block side

// out (group*Mg, Cg, K) from w (group*Cg, Mg, K) as in the header, K = kh * kw
void flip_weights(const float *w, int64_t group, int64_t Cg, int64_t Mg, int64_t K, float *out) {
    for (int64_t g = 0; g < group; ++g) {
        const float *wg = w + g * Cg * Mg * K;
        float *og = out + g * Mg * Cg * K;
        for (int64_t m0 = 0; m0 < Mg; m0 += BLOCK) {
            const int64_t m1 = std::min(Mg, m0 + BLOCK);
            for (int64_t c0 = 0; c0 < Cg; c0 += BLOCK) {
                const int64_t c1 = std::min(Cg, c0 + BLOCK);
                for (int64_t m = m0; m < m1; ++m) {
                    float *dst = og + (m * Cg + c0) * K;
                    for (int64_t c = c0; c < c1; ++c, dst += K) {
                        const float *src = wg + (c * Mg + m) * K;
                        for (int64_t t = 0; t < K; ++t) dst[t] = src[K - 1 - t];
                    }
                }
            }
        }
    }
}

using OutBuf = nb::ndarray<float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

// `out`: a writeable C-contiguous float32 array of the result's shape that does not overlap w
// (the caller's scratch: a fresh array of weights' size costs its page faults, ~2-4 ms for
// 512 x 512 x 3 x 3), written and returned; None: a new array
nb::object conv_transpose_weights(In4 w, int64_t group, nb::handle out) {
    const int64_t C = w.shape(0), Mg = w.shape(1), kh = w.shape(2), kw = w.shape(3);
    if (group <= 0 || C % group)
        throw std::invalid_argument("conv_transpose_weights: the input channels are not a multiple of group");
    const int64_t Cg = C / group, K = kh * kw, total = C * Mg * K;
    if (out.is_valid() && !out.is_none()) {
        OutBuf lent;
        if (!nb::try_cast(out, lent, false) || static_cast<int64_t>(lent.shape(0)) != group * Mg ||
            static_cast<int64_t>(lent.shape(1)) != Cg || static_cast<int64_t>(lent.shape(2)) != kh ||
            static_cast<int64_t>(lent.shape(3)) != kw)
            throw std::invalid_argument("conv_transpose_weights: out is not a writeable float32 (M, C/g, kh, kw) array");
        const auto lo = reinterpret_cast<uintptr_t>(lent.data()), a = reinterpret_cast<uintptr_t>(w.data());
        if (total && lo < a + total * sizeof(float) && a < lo + total * sizeof(float))
            throw std::invalid_argument("conv_transpose_weights: out overlaps w");
        {
            nb::gil_scoped_release release;
            flip_weights(w.data(), group, Cg, Mg, K, lent.data());
        }
        return nb::borrow(out);
    }
    std::unique_ptr<float[]> out_owned(new float[total ? total : 1]);
    {
        nb::gil_scoped_release release;
        flip_weights(w.data(), group, Cg, Mg, K, out_owned.get());
    }
    nb::capsule owner(out_owned.get(), [](void *ptr) noexcept { delete[] static_cast<float *>(ptr); });
    float *data = out_owned.release();
    return nb::cast(Out4(data,
                {static_cast<size_t>(group * Mg), static_cast<size_t>(Cg), static_cast<size_t>(kh),
                 static_cast<size_t>(kw)},
                owner));
}


// ---------------------------------------------------------------------------------------
// depthwise backward kernels (see the header)

// per output phase r of one axis of a depthwise ConvTranspose: the taps that reach it and
// the input offset each adds to the phase index q (output cell q*s + r)
struct PhaseTaps {
    std::vector<int64_t> count;                // outputs of phase r
    std::vector<std::vector<int64_t>> tap;     // taps k of phase r
    std::vector<std::vector<int64_t>> offset;  // i = q + offset
    int64_t lo = 0, hi = 0;                    // input margins before / after the plane
};

PhaseTaps phase_taps(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t begin) {
    PhaseTaps p;
    p.count.assign(s, 0);
    p.tap.resize(s);
    p.offset.resize(s);
    int64_t lo = 0, hi = in - 1;
    for (int64_t r = 0; r < s; ++r) {
        p.count[r] = r < out ? (out - r + s - 1) / s : 0;
        if (!p.count[r]) continue;
        for (int64_t t = 0; t < k; ++t) {
            const int64_t v = r + begin - t * d;
            if (((v % s) + s) % s) continue;
            const int64_t off = v / s;  // exact
            // the taps that only ever read outside the plane are dropped (their cells are 0)
            if (off + p.count[r] - 1 < 0 || off > in - 1) continue;
            p.tap[r].push_back(t);
            p.offset[r].push_back(off);
            lo = std::min(lo, off);
            hi = std::max(hi, off + p.count[r] - 1);
        }
    }
    p.lo = -lo;
    p.hi = hi - (in - 1);
    return p;
}

// dst[0..n) = sum_t w[t] * base[rel[t] + 0..n) (n floats, scalar)
inline void taps_sum(const float *base, const int64_t *rel, const float *w, int64_t taps, int64_t n, float *dst) {
    for (int64_t q = 0; q < n; ++q) {
        float acc = 0.0f;
        for (int64_t t = 0; t < taps; ++t) acc += w[t] * base[rel[t] + q];
        dst[q] = acc;
    }
}

#if ONNX_LIGHT_AVX512
// taps_sum in 8 lanes, the sums kept in registers. Lane q reads only src[t][q], so the last
// vector reads up to 7 floats past the row (the caller's buffers have that slack) into lanes
// whose sums are dropped: dst holds n rounded up to 8 floats.
AVX2 void taps_sum_avx2(const float *base, const int64_t *rel, const float *w, int64_t taps, int64_t n, float *dst) {
    // two (one vector) or four (two vectors) independent sums per vector of outputs: one
    // chain of taps FMAs waits on the FMA's latency (a 5 x 5 kernel on a 7-wide row: 2.5x)
    int64_t q = 0;
    for (; q + 8 < n; q += 16) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
        int64_t t = 0;
        for (; t + 1 < taps; t += 2) {
            const __m256 u = _mm256_set1_ps(w[t]), v = _mm256_set1_ps(w[t + 1]);
            a0 = _mm256_fmadd_ps(u, _mm256_loadu_ps(base + rel[t] + q), a0);
            a1 = _mm256_fmadd_ps(u, _mm256_loadu_ps(base + rel[t] + q + 8), a1);
            b0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(base + rel[t + 1] + q), b0);
            b1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(base + rel[t + 1] + q + 8), b1);
        }
        if (t < taps) {
            const __m256 u = _mm256_set1_ps(w[t]);
            a0 = _mm256_fmadd_ps(u, _mm256_loadu_ps(base + rel[t] + q), a0);
            a1 = _mm256_fmadd_ps(u, _mm256_loadu_ps(base + rel[t] + q + 8), a1);
        }
        _mm256_storeu_ps(dst + q, _mm256_add_ps(a0, b0));
        _mm256_storeu_ps(dst + q + 8, _mm256_add_ps(a1, b1));
    }
    if (q < n) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        int64_t t = 0;
        for (; t + 3 < taps; t += 4)
            for (int j = 0; j < 4; ++j)
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(w[t + j]), _mm256_loadu_ps(base + rel[t + j] + q), acc[j]);
        for (; t < taps; ++t) acc[0] = _mm256_fmadd_ps(_mm256_set1_ps(w[t]), _mm256_loadu_ps(base + rel[t] + q), acc[0]);
        _mm256_storeu_ps(dst + q, _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    }
}

#endif

struct Geometry2 {
    int64_t sh, sw, dh, dw, bh, bw, oh, ow;
};

// y (planes, oh, ow) from x (planes, h, w) and w (channels, kh, kw) (plane p: channel p % channels):
// see the header
void conv_transpose_planes(const float *x, const float *w, int64_t planes, int64_t channels, int64_t h, int64_t wd,
                           int64_t kh, int64_t kw, const Geometry2 &g, float *y) {
    const PhaseTaps rows = phase_taps(h, g.oh, kh, g.sh, g.dh, g.bh);
    const PhaseTaps cols = phase_taps(wd, g.ow, kw, g.sw, g.dw, g.bw);
    const int64_t hp = h + rows.lo + rows.hi, wp = wd + cols.lo + cols.hi;
    // 16 floats of slack: the last vector of a row may read past the plane (taps_sum_avx2)
    std::vector<float> plane(static_cast<size_t>(hp * wp + 16));
    std::vector<float> phase_row(static_cast<size_t>(g.ow + 16));
    // per phase pair (ry, rx): the taps' offsets in the plane from the row of phase index 0
    // and their kernel cells; their weights are gathered once per plane
    const int64_t pairs = g.sh * g.sw;
    std::vector<std::vector<int64_t>> rel(pairs), cell(pairs);
    for (int64_t ry = 0; ry < g.sh; ++ry)
        for (int64_t rx = 0; rx < g.sw; ++rx)
            for (size_t a = 0; a < rows.tap[ry].size(); ++a)
                for (size_t b = 0; b < cols.tap[rx].size(); ++b) {
                    rel[ry * g.sw + rx].push_back((rows.offset[ry][a] + rows.lo) * wp + cols.lo + cols.offset[rx][b]);
                    cell[ry * g.sw + rx].push_back(rows.tap[ry][a] * kw + cols.tap[rx][b]);
                }
    std::vector<std::vector<float>> wt(pairs);
    bool avx2 = false;
#if ONNX_LIGHT_AVX512
    avx2 = has_avx2_fma();
#endif
    for (int64_t p = 0; p < planes; ++p) {
        const float *xp = x + p * h * wd, *wc = w + (p % channels) * kh * kw;
        float *yp = y + p * g.oh * g.ow;
        std::fill(plane.begin(), plane.end(), 0.0f);
        for (int64_t i = 0; i < h; ++i)
            std::memcpy(plane.data() + (i + rows.lo) * wp + cols.lo, xp + i * wd, sizeof(float) * wd);
        for (int64_t k = 0; k < pairs; ++k) {
            wt[k].resize(cell[k].size());
            for (size_t t = 0; t < cell[k].size(); ++t) wt[k][t] = wc[cell[k][t]];
        }
        for (int64_t ty = 0; ty < g.oh; ++ty) {
            const int64_t ry = ty % g.sh, qy = ty / g.sh;
            const float *base = plane.data() + qy * wp;
            float *yrow = yp + ty * g.ow;
            for (int64_t rx = 0; rx < g.sw; ++rx) {
                const int64_t n = cols.count[rx], k = ry * g.sw + rx;
                const int64_t taps = static_cast<int64_t>(rel[k].size());
                if (!n) continue;
                // the vector loop writes n rounded up to 8: straight into y where the overrun lands
                // in rows computed later (rows and planes go in order)
                const int64_t after = (planes - p) * g.oh * g.ow - (ty + 1) * g.ow;
                const bool direct = g.sw == 1 && (n % 8 == 0 || after >= 8);
                float *dst = direct ? yrow : phase_row.data();
#if ONNX_LIGHT_AVX512
                if (avx2)
                    taps_sum_avx2(base, rel[k].data(), wt[k].data(), taps, n, dst);
                else
#endif
                    taps_sum(base, rel[k].data(), wt[k].data(), taps, n, dst);
                if (!direct)
                    for (int64_t q = 0; q < n; ++q) yrow[q * g.sw + rx] = dst[q];
            }
        }
    }
}

struct Geo {
    int64_t v[2];
};

Geo pair(const std::vector<int64_t> &v, const char *what) {
    if (v.size() != 2) throw std::invalid_argument(std::string(what) + ": expected 2 values per attribute");
    return Geo{{v[0], v[1]}};
}

using OutAny4 = nb::ndarray<float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

// the result array: `out` when given (a writeable C-contiguous float32 array of `shape`), else new
float *result_buffer(nb::handle out, const size_t (&shape)[4], nb::object &result, const char *what) {
    if (out.is_valid() && !out.is_none()) {
        OutAny4 lent;
        if (!nb::try_cast(out, lent, false))
            throw std::invalid_argument(std::string(what) + ": out is not a writeable C-contiguous float32 array");
        for (int i = 0; i < 4; ++i)
            if (lent.shape(i) != shape[i]) throw std::invalid_argument(std::string(what) + ": out has another shape");
        result = nb::borrow(out);
        return lent.data();
    }
    const size_t total = shape[0] * shape[1] * shape[2] * shape[3];
    std::unique_ptr<float[]> owned(new float[total ? total : 1]);
    float *data = owned.get();
    nb::capsule owner(owned.release(), [](void *ptr) noexcept { delete[] static_cast<float *>(ptr); });
    result = nb::cast(Out4(data, {shape[0], shape[1], shape[2], shape[3]}, owner));
    return data;
}

nb::object depthwise_conv_transpose(In4 x, In4 w, std::vector<int64_t> strides, std::vector<int64_t> dilations,
                                    std::vector<int64_t> begin, std::vector<int64_t> size, nb::handle out) {
    const char *what = "depthwise_conv_transpose";
    const Geo s = pair(strides, what), d = pair(dilations, what), b = pair(begin, what), o = pair(size, what);
    const int64_t n = x.shape(0), c = x.shape(1), h = x.shape(2), wd = x.shape(3);
    if (static_cast<int64_t>(w.shape(0)) != c || w.shape(1) != 1)
        throw std::invalid_argument("depthwise_conv_transpose: w is not (C, 1, kh, kw) for x's C channels");
    for (int i = 0; i < 2; ++i)
        if (s.v[i] < 1 || d.v[i] < 1 || o.v[i] < 0)
            throw std::invalid_argument("depthwise_conv_transpose: strides and dilations must be >= 1, sizes >= 0");
    const Geometry2 g{s.v[0], s.v[1], d.v[0], d.v[1], b.v[0], b.v[1], o.v[0], o.v[1]};
    const size_t shape[4] = {static_cast<size_t>(n), static_cast<size_t>(c), static_cast<size_t>(o.v[0]),
                             static_cast<size_t>(o.v[1])};
    nb::object result;
    float *y = result_buffer(out, shape, result, what);
    const int64_t kh = w.shape(2), kw = w.shape(3);
    {
        nb::gil_scoped_release release;
        if (h && wd)
            conv_transpose_planes(x.data(), w.data(), n * c, c, h, wd, kh, kw, g, y);
        else
            std::fill(y, y + n * c * g.oh * g.ow, 0.0f);
    }
    return result;
}

using In3 = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;
using Out3 = nb::ndarray<float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

// the inputs j of one axis (of `in`) whose output j*s + off lands in [0, out): [first, last)
inline void landing(int64_t in, int64_t s, int64_t off, int64_t out, int64_t &first, int64_t &last) {
    first = off >= 0 ? 0 : (-off + s - 1) / s;
    last = out - off <= 0 ? 0 : std::min(in, (out - 1 - off) / s + 1);
    if (last < first) last = first;
}

void col2im_f32(In3 cols, int64_t kh, int64_t kw, int64_t ih, int64_t iw, int64_t sh, int64_t sw, int64_t dh,
                int64_t dw, int64_t top, int64_t left, Out3 y) {
    const int64_t planes = cols.shape(0), oh = y.shape(1), ow = y.shape(2);
    if (kh < 1 || kw < 1 || ih < 0 || iw < 0 || sh < 1 || sw < 1 || dh < 1 || dw < 1)
        throw std::invalid_argument("col2im_f32: kernel, strides and dilations must be >= 1, sizes >= 0");
    if (static_cast<int64_t>(cols.shape(1)) != kh * kw || static_cast<int64_t>(cols.shape(2)) != ih * iw ||
        static_cast<int64_t>(y.shape(0)) != planes)
        throw std::invalid_argument("col2im_f32: cols is not (planes, kh*kw, ih*iw) for y's planes");
    const float *c = cols.data();
    float *out = y.data();
    nb::gil_scoped_release release;
    std::fill(out, out + planes * oh * ow, 0.0f);
    for (int64_t p = 0; p < planes; ++p) {
        float *yp = out + p * oh * ow;
        for (int64_t a = 0; a < kh; ++a) {
            int64_t i0, i1;
            landing(ih, sh, a * dh - top, oh, i0, i1);
            for (int64_t b = 0; b < kw; ++b) {
                int64_t j0, j1;
                landing(iw, sw, b * dw - left, ow, j0, j1);
                const float *tap = c + (p * kh * kw + a * kw + b) * ih * iw;
                for (int64_t i = i0; i < i1; ++i) {
                    const float *src = tap + i * iw;
                    float *row = yp + (i * sh + a * dh - top) * ow + (b * dw - left);
                    if (sw == 1) {
                        for (int64_t j = j0; j < j1; ++j) row[j] += src[j];
                    } else {
                        for (int64_t j = j0; j < j1; ++j) row[j * sw] += src[j];
                    }
                }
            }
        }
    }
}

void im2col_f32(In4 x, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t top,
                int64_t left, OutAny4 y) {
    const int64_t n = x.shape(0), c = x.shape(1), h = x.shape(2), wd = x.shape(3);
    const int64_t oh = y.shape(2), ow = y.shape(3), taps = kh * kw;
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1)
        throw std::invalid_argument("im2col_f32: kernel, strides and dilations must be >= 1");
    if (static_cast<int64_t>(y.shape(0)) != n || static_cast<int64_t>(y.shape(1)) != c * taps)
        throw std::invalid_argument("im2col_f32: y is not (N, C*kh*kw, oh, ow) for x");
    const float *xs = x.data();
    float *out = y.data();
    nb::gil_scoped_release release;
    for (int64_t p = 0; p < n * c; ++p) {
        const float *plane = xs + p * h * wd;
        for (int64_t a = 0; a < kh; ++a) {
            for (int64_t b = 0; b < kw; ++b) {
                float *dst = out + (p * taps + a * kw + b) * oh * ow;
                int64_t j0 = 0, j1 = 0;  // [j0, j1): the outputs whose input column j*sw + b*dw - left is in x
                for (int64_t j = 0; j < ow; ++j) {
                    const int64_t q = j * sw + b * dw - left;
                    if (q < 0) j0 = j + 1;
                    if (q < wd) j1 = j + 1;
                }
                if (j1 < j0) j1 = j0;
                for (int64_t i = 0; i < oh; ++i, dst += ow) {
                    const int64_t r = i * sh + a * dh - top;
                    if (r < 0 || r >= h || j0 == j1) {
                        std::fill(dst, dst + ow, 0.0f);
                        continue;
                    }
                    const float *src = plane + r * wd + (j0 * sw + b * dw - left);  // column of output j0
                    std::fill(dst, dst + j0, 0.0f);
                    if (sw == 1) {  // rows of a few floats (7 x 7 maps): a loop, not a memcpy call
                        for (int64_t j = j0; j < j1; ++j) dst[j] = src[j - j0];
                    } else {
                        for (int64_t j = j0; j < j1; ++j) dst[j] = src[(j - j0) * sw];
                    }
                    std::fill(dst + j1, dst + ow, 0.0f);
                }
            }
        }
    }
}

}  // namespace
}  // namespace onnx_light_conv_backward

void bind_conv_backward(nb::module_ &m) {
    using namespace onnx_light_conv_backward;
    m.def("conv_transpose_weights", &conv_transpose_weights, nb::arg("w"), nb::arg("group"),
          nb::arg("out").none() = nb::none(),
          "ConvTranspose weights (C, M/g, kh, kw) as the weights (M, C/g, kh, kw) of the stride-1 convolution it "
          "equals: channel axes swapped per group, both spatial axes flipped (float32); written into `out` (and "
          "`out` returned) when given");
    m.def("depthwise_conv_transpose", &depthwise_conv_transpose, nb::arg("x"), nb::arg("w"), nb::arg("strides"),
          nb::arg("dilations"), nb::arg("begin"), nb::arg("size"), nb::arg("out").none() = nb::none(),
          "A 2-D ConvTranspose of x (N, C, h, w) with depthwise weights (C, 1, kh, kw), group C, no bias: output "
          "(N, C, *size) after the begin crop `begin` (float32; into `out` when given)");
    m.def("im2col_f32", &im2col_f32, nb::arg("x"), nb::arg("kh"), nb::arg("kw"), nb::arg("sh"), nb::arg("sw"),
          nb::arg("dh"), nb::arg("dw"), nb::arg("top"), nb::arg("left"), nb::arg("y"),
          "y (N, C*kh*kw, oh, ow): y[n, c*K + a*kw + b, i, j] = x[n, c, i*sh + a*dh - top, j*sw + b*dw - left], 0 "
          "outside x (float32)");
    m.def("col2im_f32", &col2im_f32, nb::arg("cols"), nb::arg("kh"), nb::arg("kw"), nb::arg("ih"), nb::arg("iw"),
          nb::arg("sh"), nb::arg("sw"), nb::arg("dh"), nb::arg("dw"), nb::arg("top"), nb::arg("left"), nb::arg("y"),
          "y (P, oh, ow) = the fold of cols (P, kh*kw, ih*iw): tap (a, b) of input cell (i, j) adds to output cell "
          "(i*sh + a*dh - top, j*sw + b*dw - left) where it lands (float32, taps in kernel order from zero)");
}
